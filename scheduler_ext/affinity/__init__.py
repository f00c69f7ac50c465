"""kube-scheduler semantics the predicates and nodeorder plugins share (selectors, taints, affinity)."""
