"""mkdocs hook: the scenario page's field tables come from the input models (stepbudget.views.reference)."""

from stepbudget.views.reference import scenario_reference

MARK = "<!-- scenario-fields -->"


def on_page_markdown(markdown, page, config, files):
    return markdown.replace(MARK, scenario_reference()) if MARK in markdown else markdown
