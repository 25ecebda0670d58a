#!/usr/bin/env python3
"""scripts/make_golden_tokenizer.py - golden data for the tokenizer tests.

Trains a small byte-level BPE with Hugging Face's `tokenizers`, set up as GPT-2's
(ByteLevel pre-tokenizer with GPT-2's regex and no prefix space, ByteLevel decoder),
on the varied text below, and records what that library makes of a set of tricky
strings. tests/cpu/test_tokenizer.cpp checks common/tokenizer.cpp against it: the
pre-tokenizer's pieces, the ids, and the decoded text.

Outputs, committed to the repository (regenerate only to change the cases):
    tests/data/tokenizer/vocab.json   the vocabulary (GPT-2's vocab.json format)
    tests/data/tokenizer/merges.txt   the merges (GPT-2's merges.txt format)
    tests/data/tokenizer/cases.json   {"cases": [{"text", "pretokens", "ids", "decoded"}]}

Run from the repository root:
    pip install tokenizers
    python3 scripts/make_golden_tokenizer.py
"""
import json
import pathlib

import tokenizers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

OUTPUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "tokenizer"
VOCAB_SIZE = 800

# Training text, written for this script: prose with contractions, numbers, code,
# several scripts and emoji, so the merges cover what the cases exercise.
CORPUS = [
    "The quick decoder doesn't wait: it reads the weights once per step, and that's the floor.",
    "We've measured it twice; they're the same numbers, and I'll write them down. You'd agree.",
    "She's sure it's fast, but he'd rather see the table. I'm not surprised, we'll check it.",
    "A batch of 32 rows, 100 new tokens, 12 layers and 768 channels: 124439808 parameters.",
    "Pi is about 3.14159, e is about 2.71828, and 1,000,000 is a million. 2024-05-17 was a Friday.",
    "Step 1: load the model.\nStep 2: warm up.\nStep 3: time at least 5 runs.\n\nThen compare.",
    "def generate(model, prompt):\n    tokens = encode(prompt)\n    for step in range(100):\n"
    "        tokens.append(argmax(model(tokens)))\n    return decode(tokens)\n",
    "if (x != y && y >= 0) { return x + y; } else { return -1; }  // why? because!",
    "Hello, world! How are you? Fine, thanks... and you?! (Yes.) [No.] {Maybe.}",
    "    indented with spaces\n\tindented with a tab\n\t\ttwo tabs\n  \n",
    "Un café au lait, s'il vous plaît. La naïveté du garçon était touchante.",
    "Die Größe der Straße überrascht: fünf Äpfel, zwölf Bäume, ein Fußgänger.",
    "El niño comió piña en la mañana; ¿dónde está el señor? ¡Aquí!",
    "Ελληνικά γράμματα: α β γ δ. Русский текст: привет, мир, как дела?",
    "日本語のテキストを少し書きます。東京は大きい都市です。",
    "中文测试：我们今天学习解码器。한국어 문장도 조금 있습니다.",
    "Emoji: 😀 😃 👍 👍🏽 🎉 ❤️ 👨‍👩‍👧‍👦 🏳️‍🌈 and 🚀 to the moon.",
    "Combining marks: e\u0301 a\u0308 n\u0303; numbers in other scripts: ١٢٣ ٤٥٦ Ⅻ ½ ¾.",
    "Spaces\u00a0that\u00a0do\u00a0not\u00a0break, ideographic\u3000space, and thin\u2009ones.",
    "UPPER CASE DON'T SHOUT, lower case doesn't whisper; MiXeD CaSe is odd.",
    "The tokens are ids; the ids are numbers; the numbers index the embedding table.",
    "Greedy decoding takes the argmax at every step until every row has produced EOS.",
    "Memory bandwidth bounds decode: bytes moved per step divided by bytes per second.",
]

CASES = [
    "",
    " ",
    "   ",
    "hello",
    " hello",
    "hello ",
    "hello world",
    "hello  world",
    "hello   world  ",
    "   leading spaces",
    "trailing spaces   ",
    "\n",
    "line one\nline two",
    "paragraph one\n\nparagraph two",
    "\n\n\n",
    " \n \n ",
    "\r\n",
    "tab\tseparated\tvalues",
    "\t\tindented",
    "mixed  \t\n  whitespace\n",
    "don't I'll we've they're she'd he's I'm",
    "DON'T I'LL",
    "it 's",
    " 's",
    "'s",
    "''s 'x 'hello'",
    "12345 3.14 -42 1,000,000",
    "abc123def 2024-01-01",
    "!!! ??? ... --- ()[]{}",
    "Hello, world! How are you?",
    "café naïve Größe",
    "cafe\u0301 na\u0308ive",
    "日本語のテキスト",
    "中文 测试 한국어",
    "Ελληνικά Русский",
    "😀 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈",
    "x\u00a0y a\u3000b c\u2009d",
    "line\u2028separator\u0085next",
    "zero\u200bwidth",
    "x\x1cy\x1fz",
    "x \x1cy",
    "vertical\x0btab form\x0cfeed",
    "١٢٣ ٤٥٦ Ⅻ ½",
    "def f(x):\n    return x * 2\n",
    "The decoder doesn't wait: it reads 124439808 parameters per step, and that's the floor.",
]


def byte_level_alphabet_inverse():
    """GPT-2's bytes_to_unicode(), inverted: byte-level character -> byte."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    mapping = {}
    extra = 0
    for byte in range(256):
        if byte in printable:
            mapping[chr(byte)] = byte
        else:
            mapping[chr(256 + extra)] = byte
            extra += 1
    return mapping


def main():
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"])
    tokenizer.train_from_iterator(CORPUS, trainer)

    OUTPUT.mkdir(parents=True, exist_ok=True)
    tokenizer.model.save(str(OUTPUT))  # vocab.json and merges.txt

    to_byte = byte_level_alphabet_inverse()
    cases = []
    for text in CASES:
        pieces = tokenizer.pre_tokenizer.pre_tokenize_str(text)
        pretokens = [bytes(to_byte[c] for c in piece).decode("utf-8") for piece, _ in pieces]
        ids = tokenizer.encode(text).ids
        cases.append({"text": text, "pretokens": pretokens, "ids": ids,
                      "decoded": tokenizer.decode(ids)})
    document = {"generator": "scripts/make_golden_tokenizer.py",
                "tokenizers_version": tokenizers.__version__, "cases": cases}
    (OUTPUT / "cases.json").write_text(json.dumps(document, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {OUTPUT}: vocabulary of {tokenizer.get_vocab_size()}, {len(cases)} cases")


if __name__ == "__main__":
    main()
