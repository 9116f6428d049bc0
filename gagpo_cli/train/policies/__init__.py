"""Policies: what acts and is trained, one kind per file, registered as ``gagpo.policy_kinds`` entry points.

- ``kinds.py``: ``model.name`` -> policy kind (an entry point's name, ``bow-mlp``; any other name is a
  language model) and what each kind supports; ``load_policy`` builds one. A new kind is one class and one
  entry point (in this project's pyproject or a third party's).
- ``protocol.py``: what the trainer needs from a policy (``TrainablePolicy``, ``ScoringPolicy``,
  ``GeneratingPolicy``).
- ``lm.py``: the language model (loading, precision, LoRA, the training forward, weights), with its
  generate part ``lm_generate.py`` and its score part ``lm_score.py``; ``final_logits.py``: the map from its
  output projection to the logits its own ``forward`` returns.
- ``bow_mlp.py``: the featurised bag-of-words MLP (score mode only); ``bow_features.py``: its hashed
  features, factored and cached.
- ``scoring.py``: what a scoring policy takes and returns; ``categorical.py``: the softmax policy over a
  step's candidates; ``padding.py``: ragged rows to rectangles; ``critic.py``: the value head.
"""
