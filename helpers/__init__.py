"""Search-R1 course helpers: a library with one module per stage of the call chain,

data -> protocol -> search -> rollout -> reward -> train -> eval -> analyse,

plus engine (the local PyTRIO), models (provisioning), presets (every named set of budgets) and
Perplexity's additions (efficiency, mismatch); and above it the course layer (`helpers.course`,
`helpers.widgets`, `helpers.checkers`) that the notebooks use and the library never imports.
"""

__version__ = "0.1.0"
