"""Write the tiny RoBERTa sentiment model that tests/test_affect.py builds (random weights, a
word-level vocabulary of seven sentences, hidden size 32, seed 0) to a directory, so a benchmark
can run the RoBERTa affect path end to end without the real weights:

    python -m benchmarks.tiny_roberta /tmp/tiny-roberta
    etamem bench locomo FILE --no-llm --set affect_backend=roberta --set affect_model=/tmp/tiny-roberta ...

It checks the plumbing (the RoBERTa tagger's embeddings in the Affect view, the merge), not
recall: its weights are random and almost every word of a real conversation is unknown to it, so
figures measured with it say nothing about what a trained affect model would add.
"""
from __future__ import annotations

import argparse
from pathlib import Path

# as tests/test_affect.py (CORPUS, LABELS, `_save_model`, `tiny_tokenizer`)
CORPUS = [
    "I love sunny days at the beach with my kids",
    "I hate rainy mornings and cold coffee",
    "the meeting is at noon on Tuesday",
    "Caroline went to the support group yesterday",
    "Melanie painted a lake sunrise last year",
    "we had a great time at the concert",
    "that was a terrible awful day",
]
LABELS = {0: "negative", 1: "neutral", 2: "positive"}


def write_tiny_roberta(path: str | Path, seed: int = 0) -> str:
    """Save the tiny model and its tokenizer under `path`; returns the path."""
    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(CORPUS, trainers.WordLevelTrainer(
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"]))
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", cls_token="<s>", sep_token="</s>",
        pad_token="<pad>", unk_token="<unk>", mask_token="<mask>", model_max_length=128)
    torch.manual_seed(seed)
    cfg = transformers.RobertaConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=130, initializer_range=0.5,
        num_labels=len(LABELS), id2label=LABELS, label2id={v: k for k, v in LABELS.items()},
        pad_token_id=1, bos_token_id=0, eos_token_id=2)
    Path(path).mkdir(parents=True, exist_ok=True)
    transformers.RobertaForSequenceClassification(cfg).save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return str(path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", help="directory to write the model into")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(write_tiny_roberta(args.path, args.seed))


if __name__ == "__main__":
    main()
