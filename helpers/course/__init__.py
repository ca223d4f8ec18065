"""The course layer: what the notebooks share, on top of the library.

The library (`helpers.data` ... `helpers.analyse`, `helpers.efficiency`, `helpers.mismatch`, the
engine, the experiment) follows the Search-R1 chain and knows nothing of notebooks. The course
layer sits above it and is the only code that names a notebook:

- `helpers.course.state`: one engine, tokenizer and search client per kernel, and what one
  notebook hands the next (`remember` / `recall`);
- `helpers.course.policies`: the policies a learner can run (base, the recorded run's adapters,
  their own checkpoints);
- `helpers.course.learnable`: the questions a short CPU run can learn on;
- `helpers.widgets`: the views and live widgets;
- `helpers.checkers`: every exercise check.

No library module imports any of these (tests/test_imports.py reads every import).
"""
