"""What a run leaves on disk: the export layout (Hugging Face directories), training checkpoints, model cards."""
