"""The W&B wire (issue 19): the unmodified wandb SDK logs into openruns."""
