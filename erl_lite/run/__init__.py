"""A run around the ERL step: the trainer, its checkpoints and the files a run leaves."""
