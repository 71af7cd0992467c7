"""HfArgumentParser over the script's own dataclass and transformers' TrainingArguments."""
from dataclasses import dataclass, field

from transformers import HfArgumentParser, Trainer, TrainingArguments


@dataclass
class ModelArguments:
    model_name_or_path: str = field(default="gpt2")
    use_fast: bool = True


def main():
    parser = HfArgumentParser((ModelArguments, TrainingArguments))
    _model_args, training_args = parser.parse_args_into_dataclasses()
    checkpoint = None
    if training_args.resume_from_checkpoint is not None:
        checkpoint = training_args.resume_from_checkpoint
    trainer = Trainer(args=training_args)
    trainer.train(resume_from_checkpoint=checkpoint)
