"""TrainingArguments accepts --resume_from_checkpoint, but this script never passes it on:
Trainer does not read that field itself, so the flag would train from scratch."""
from transformers import HfArgumentParser, Trainer, TrainingArguments

(training_args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
Trainer(args=training_args).train()
