"""YAML and TOML read within bounds: plain data out, or one line that says which bound."""

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from stepbudget.inputs.documents import MAX_DEPTH, MAX_INT_DIGITS, MAX_NODES, LimitError, plain, read_document, read_yaml
from stepbudget.inputs.scenario import ScenarioError, apply_overrides, load


def test_timestamps_stay_text_and_a_timestamp_tag_is_refused():
    assert read_yaml("source: 2001-02-30\nday: 2001-02-03") == {"source": "2001-02-30", "day": "2001-02-03"}
    assert load("llama3-405b", ["source=2001-02-30"]).source == "2001-02-30"
    with pytest.raises(LimitError, match="a !!timestamp tag on 'abc': no field takes a date; remove the tag"):
        read_yaml("name: !!timestamp abc")
    with pytest.raises(ScenarioError, match="^override name: a !!timestamp tag"):
        apply_overrides({}, ["name=!!timestamp 2001-02-03"])


def test_an_explicit_tag_on_text_it_cannot_read_is_a_yaml_error():
    for text in ("x: !!int abc", "x: !!float abc", "x: !!bool abc"):
        with pytest.raises(yaml.YAMLError):
            read_yaml(text)


def test_python_tags_are_never_constructed():
    with pytest.raises(yaml.YAMLError, match="python/object"):
        read_yaml("x: !!python/object/apply:os.system ['true']")


def test_nesting_is_bounded_by_name_not_by_recursion():
    ok = "x: " + "[" * (MAX_DEPTH - 2) + "]" * (MAX_DEPTH - 2)
    assert read_yaml(ok)["x"] is not None
    for depth in (MAX_DEPTH + 1, 5_000):
        with pytest.raises(LimitError, match=f"more than {MAX_DEPTH} levels"):
            read_yaml("x: " + "[" * depth + "]" * depth)


def test_an_alias_bomb_and_a_value_that_contains_itself_are_refused():
    bomb = 'a: &a ["x","x","x","x","x","x","x","x","x","x"]\n' + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(6))
    with pytest.raises(LimitError, match=f"{MAX_NODES:,} values"):
        read_yaml(bomb)
    with pytest.raises(LimitError, match="itself"):
        read_yaml("a: &a [*a]")
    assert read_yaml("a: &a [1, 2]\nb: *a") == {"a": [1, 2], "b": [1, 2]}  # an alias used a few times is fine


def test_integers_are_bounded_before_conversion_and_named_by_field():
    assert read_yaml("n: " + "9" * MAX_INT_DIGITS) == {"n": int("9" * MAX_INT_DIGITS)}
    with pytest.raises(ScenarioError, match=f"^layout.pp: an integer of 5,000 digits; at most {MAX_INT_DIGITS}$"):
        plain(read_yaml("layout:\n  pp: " + "9" * 5_000))
    with pytest.raises(ScenarioError, match=f"^layout.pp: an integer of 5,000 digits; at most {MAX_INT_DIGITS}$"):
        load("llama3-405b", ["layout.pp=" + "9" * 5_000])
    with pytest.raises(ScenarioError, match=r"^s.toml: line 2: pp: a number of 5,000 digits; at most 30 digits$"):
        read_document("[layout]\npp = " + "9" * 5_000, ".toml", "s.toml")
    with pytest.raises(ScenarioError, match=f"layout.pp: an integer of 100 digits; at most {MAX_INT_DIGITS}"):
        plain({"layout": {"pp": 10**99}})


def test_a_repeated_key_is_refused():
    with pytest.raises(yaml.YAMLError, match="'a' given twice"):
        read_yaml("a: 1\na: 2")


@pytest.mark.parametrize("value, kind", [(b"x", "bytes"), ({1, 2}, "set"), ((1, 2), "tuple"), (object(), "object")])
def test_plain_refuses_what_no_field_takes_naming_the_field(value, kind):
    with pytest.raises(ScenarioError, match=f"^cluster.gpu.name: a {kind} value"):
        plain({"cluster": {"gpu": {"name": value}}})


def test_plain_names_list_items_and_refuses_lone_surrogates():
    with pytest.raises(ScenarioError, match=r"^notes\[1\]: '\\udc80x' has a character that is not Unicode"):
        plain({"notes": ["ok", "\udc80x"]})
    with pytest.raises(ScenarioError, match="not Unicode"):
        plain({"\udc80": 1})


def test_overrides_name_an_empty_key_part_and_a_bound():
    for key in (".pp", ".", "layout..pp", "layout."):
        with pytest.raises(ScenarioError, match=f"^override '{key}': a name between the dots is empty"):
            apply_overrides({}, [f"{key}=1"])
    with pytest.raises(ScenarioError, match="^override name: nested more than"):
        apply_overrides({}, ["name=" + "[" * 135])
    assert apply_overrides({}, ["name=[[[["]) == {"name": "[[[["}  # unreadable YAML is kept as the text


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
                    max_leaves=30))
def test_what_safe_dump_writes_reads_back_or_is_refused_by_name(data):
    text = yaml.safe_dump({"x": data})
    try:
        back = read_yaml(text)
    except LimitError:
        return
    except yaml.YAMLError as e:  # the only thing safe_dump writes that is refused: a long integer
        pytest.fail(f"{text!r}: {e}")
    try:
        plain(back)
    except ScenarioError as e:
        assert str(e).startswith("x") and "\n" not in str(e)  # a surrogate or a long int, named by its field
