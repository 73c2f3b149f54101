#!/usr/bin/env python3
"""How far careful people agree with the evaluation corpus's labels (issue #16).

Reads the corpus and the blind re-annotations in shared/core/tests/fixtures/eval/agreement/
(each annotator saw only the entries' inputs, the corpus README's Labels section and the class
table: not the labels, not the classifier) and prints, for every pair of label sets, how often
they agree on the retry decision, the class, and `dead` (where both define it).
Usage: scripts/label-agreement.py
"""
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
EVAL = ROOT / "shared/core/tests/fixtures/eval"


def load(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    corpus = {e["id"]: e["label"] for e in load(EVAL / "corpus.jsonl")}
    sample = [e["id"] for e in load(EVAL / "agreement/sample.jsonl")]
    sets = {"corpus": corpus}
    for path in sorted((EVAL / "agreement").glob("annotator-*.jsonl")):
        rows = {r["id"]: r for r in load(path)}
        missing = [i for i in sample if i not in rows]
        if missing:
            sys.exit(f"{path.name}: no label for {len(missing)} sampled entries, first {missing[0]}")
        sets[path.stem] = rows
    unknown = [i for i in sample if i not in corpus]
    if unknown:
        sys.exit(f"sample.jsonl names {len(unknown)} ids the corpus lacks, first {unknown[0]}")
    print(f"{len(sample)} entries sampled from dev and validation")
    print(f"{'pair':32} {'retry':>7} {'class':>7} {'dead':>7}")
    names = list(sets)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            la, lb = sets[a], sets[b]
            retry = sum(la[x]["retry"] == lb[x]["retry"] for x in sample) / len(sample)
            klass = sum(la[x]["class"] == lb[x]["class"] for x in sample) / len(sample)
            both = [x for x in sample if la[x]["dead"] is not None and lb[x]["dead"] is not None]
            dead = sum(la[x]["dead"] == lb[x]["dead"] for x in both) / max(1, len(both))
            print(f"{a + ' / ' + b:32} {retry:7.3f} {klass:7.3f} {dead:7.3f}")


if __name__ == "__main__":
    main()
