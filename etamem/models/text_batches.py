"""Batches of texts of similar length for the text encoders (`etamem.models.encoders`,
`etamem.models.bert_encoder`): a batch is padded to its longest text, so lengths are grouped."""
from __future__ import annotations

import numpy as np

CHARS_PER_BATCH_ROW = 256  # padded characters per row a batch may average (about 64 tokens)
MODEL_MAX_CHARS = 2048  # beyond this a 256/512-token model truncates anyway


def length_batches(texts: list[str], batch_size: int) -> list[np.ndarray]:
    """Index batches (int64 arrays) over `texts`, shortest first, each at most `batch_size` long
    and padded to at most `batch_size * CHARS_PER_BATCH_ROW` characters: a batch is padded to
    its longest text, so one long text among 63 short ones would cost 64 long ones (a 10 KB turn
    encoded with its units took 3.3 s instead of 0.5 s). Lengths count up to MODEL_MAX_CHARS."""
    lengths = np.minimum([len(t) for t in texts], MODEL_MAX_CHARS)
    order = np.argsort(lengths, kind="stable")
    budget = batch_size * CHARS_PER_BATCH_ROW
    batches, start = [], 0
    for end in range(1, len(order) + 1):
        full = end - start == batch_size
        over = end < len(order) and (end + 1 - start) * max(int(lengths[order[end]]), 1) > budget
        if end == len(order) or full or over:
            batches.append(order[start:end])
            start = end
    return batches
