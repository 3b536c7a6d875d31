"""Training: the pretraining model, the one engine every command plugs a task into, the optimizer, pretraining
and continued pretraining, and the run logs."""
