"""Many layouts at once: the layout space, search, scaling curves and what-if comparisons.

Everything here evaluates layouts through the one array model (``derive`` -> ``estimate``
and ``memory_per_gpu``); nothing here has a formula of its own.
"""
