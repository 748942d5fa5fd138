"""The journal kernel: canonical JSON, identity, matching, the replay predicate and the folds."""
