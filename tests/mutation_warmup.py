"""A pytest plugin loaded only by `make mutation` (``-p tests.mutation_warmup`` in
``[tool.mutmut]``): imports the transformers model classes once, in mutmut's fork server.

Every learner test builds the tiny Llama, and transformers imports its model code lazily
(≈ 5 s here, most of it `auto_factory` pulling in scikit-learn). Imported in the fork server,
each forked mutant run inherits it instead of paying it again.
"""

import transformers.models.llama.modeling_llama  # noqa: F401
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401
