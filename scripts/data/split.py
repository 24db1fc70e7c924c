"""Deterministic stratified 80/10/10 split of the Pang & Lee sentence polarity corpus.

usage: python3 split.py RAW_CSV OUT_DIR

RAW_CSV is pattern's polarity-en-pang&lee2.csv (UTF-8 with BOM, rows "label","text" with label
1 / -1). Writes OUT_DIR/{train,val,test}.csv with header text,label, labels negative/positive,
standard csv quoting, UTF-8 without BOM, "\n" line ends. Texts are stripped of the trailing
" \n" every row carries. Only the standard library is used, and no RNG: within each class the
rows are ordered by sha256(SEED + text), the first 80% go to train, the next 10% to val, the
rest to test; each split keeps the corpus order. The result is identical on any Python 3.
"""
import csv
import hashlib
import os
import sys

SEED = "ortserve-polarity-v1"
LABELS = {"-1": "negative", "1": "positive"}


def main(raw, out):
    with open(raw, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f))
    data = []
    for i, r in enumerate(rows):
        if len(r) != 2 or r[0] not in LABELS:
            sys.exit(f"split: error: {raw} row {i + 1} is not \"1|-1\",\"text\": {r!r:.80}")
        text = r[1].strip()
        if not text:
            sys.exit(f"split: error: {raw} row {i + 1} has an empty text")
        data.append((i, text, LABELS[r[0]]))
    splits = {"train": [], "val": [], "test": []}
    for lab in ("negative", "positive"):
        cls = [d for d in data if d[2] == lab]
        cls.sort(key=lambda d: hashlib.sha256((SEED + "\0" + d[1]).encode()).hexdigest())
        n = len(cls)
        a, b = n * 8 // 10, n * 9 // 10
        splits["train"] += cls[:a]
        splits["val"] += cls[a:b]
        splits["test"] += cls[b:]
    os.makedirs(out, exist_ok=True)
    for name, items in splits.items():
        items.sort()
        tmp = os.path.join(out, f".{name}.csv.tmp")
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["text", "label"])
            for _, text, lab in items:
                w.writerow([text, lab])
        os.replace(tmp, os.path.join(out, f"{name}.csv"))
        print(f"split: {name}.csv {len(items)} rows", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: split.py RAW_CSV OUT_DIR")
    main(sys.argv[1], sys.argv[2])
