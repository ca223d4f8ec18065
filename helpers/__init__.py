"""Search-R1 course helpers: one module per stage of the call chain.

data -> protocol -> search -> rollout -> reward -> train -> eval -> analyse,
plus engine (the local PyTRIO), models (provisioning) and widgets.
"""

__version__ = "0.1.0"
