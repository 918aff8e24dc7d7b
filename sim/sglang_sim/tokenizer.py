"""A deterministic fake tokenizer: words and punctuation in, ids out, and back.

Every id maps to a pronounceable lower-case ASCII word; decoding prepends a space, so
text built from generated ids never needs JSON escaping (the server relies on that).
"""

import re
import zlib

VOCAB_SIZE = 151936
EOS_TOKEN_ID = 151645  # "<|im_end|>" in Qwen's vocabulary
FIRST_WORD_ID = 100

_CONS = "bcdfghjklmnprstvz"
_VOW = "aeiou"
_WORD_RE = re.compile(r"\w+|[^\w\s]")
_pieces = {}


def word(token_id):
    """The word for a token id (stable)."""
    i = int(token_id)
    out = []
    n = i
    for _i in range(3):
        out.append(_CONS[n % 17])
        n //= 17
        out.append(_VOW[n % 5])
        n //= 5
        if n == 0:
            break
    return "".join(out)


def piece(token_id):
    """Decoded text of one generated token (leading space included)."""
    p = _pieces.get(token_id)
    if p is None:
        p = " " + word(token_id)
        if len(_pieces) < 200000:
            _pieces[token_id] = p
    return p


def split_words(text):
    return _WORD_RE.findall(text)


def encode(text):
    """Token ids of a text: one per word or punctuation mark, hashed into the vocabulary."""
    span = VOCAB_SIZE - FIRST_WORD_ID - 1000
    return [FIRST_WORD_ID + zlib.crc32(w.lower().encode("utf-8")) % span for w in split_words(text)]


def decode(ids):
    return "".join(piece(i) for i in ids).lstrip(" ")
