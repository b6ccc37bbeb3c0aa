"""Planning: a function's steps, its tensors and their places in the instance."""
