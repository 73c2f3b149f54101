#!/usr/bin/env python3
"""Scores Courier's failure classifier on the independent evaluation corpus (issue #16).

Feeds every entry of shared/core/tests/fixtures/eval/corpus.jsonl to `courierctl classify --json`
(one process, every input on stdin) and prints, for the `dev`, `validation` and `sealed` splits
and `all`, the three measures of issue #16 for Courier and for the naive rule (4xx/4.x.x retry;
5xx/5.x.x give up and suppress), then a confusion table of label class against Courier's class,
then every disagreement on the retry decision and on suppression. The `sealed` split is scored
and never shown: its entries stay out of the confusion table and the disagreement lists, so that
no rule can be tuned on them.

It reports and does not gate: the exit status is 0 whatever the scores, and 2 only when the
binary or the data is missing or unreadable. Standard library only (Python 3.9+).

    python3 scripts/classify-eval.py [--bin target/debug/courierctl] [--corpus PATH]
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter, defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_BIN = os.path.join(ROOT, "target", "debug", "courierctl")
DEFAULT_CORPUS = os.path.join(ROOT, "shared", "core", "tests", "fixtures", "eval", "corpus.jsonl")
SPLITS = ("dev", "validation", "sealed")
SEALED = "sealed"
GOALS = {"retry": 0.97, "precision": 0.97, "recall": 0.95}
CLASSES = (
    "network", "tls", "throttled", "provider_unavailable", "mailbox_temporary",
    "recipient_permanent", "content_rejected", "sender_config", "rendering", "invalid_job",
    "poison", "circuit_open", "rate_limited", "unknown",
)
SHORT = {
    "network": "net", "tls": "tls", "throttled": "thr", "provider_unavailable": "prov",
    "mailbox_temporary": "mbox", "recipient_permanent": "rcpt", "content_rejected": "cont",
    "sender_config": "sndr", "rendering": "rend", "invalid_job": "inv", "poison": "pois",
    "circuit_open": "circ", "rate_limited": "rate", "unknown": "unk", "(error)": "err",
}


def die(message):
    print(f"classify-eval: {message}", file=sys.stderr)
    sys.exit(2)


def load_corpus(path):
    if not os.path.isfile(path):
        die(f"{path} is missing (the evaluation corpus)")
    entries = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                e = json.loads(line)
                label = e["label"]
                assert isinstance(e["id"], str) and isinstance(e["input"], dict)
                assert isinstance(label["retry"], bool) and label["dead"] in (True, False, None)
                assert label["class"] in CLASSES and e["split"] in SPLITS
            except (ValueError, KeyError, AssertionError, TypeError) as err:
                die(f"{path}:{n}: not a corpus entry ({err!r})")
            entries.append(e)
    if not entries:
        die(f"{path} has no entries")
    return entries


def run_classifier(binary, inputs):
    """One verdict (a dict) per input, or None where courierctl refused the input."""
    def call(lines):
        proc = subprocess.run([binary, "classify", "--json"], input="\n".join(lines) + "\n",
                              capture_output=True, text=True, check=False)
        out = [json.loads(l) for l in proc.stdout.splitlines() if l.strip()]
        return out, proc.stderr
    lines = [json.dumps(i, ensure_ascii=False) for i in inputs]
    try:
        verdicts, _ = call(lines)
    except OSError as err:
        die(f"cannot run {binary}: {err}")
    if len(verdicts) == len(lines):
        return verdicts
    # A refused line prints nothing: classify one by one to keep verdicts aligned.
    verdicts = []
    for line in lines:
        out, err = call([line])
        if len(out) != 1:
            print(f"classify-eval: courierctl refused an input: {err.strip()}", file=sys.stderr)
        verdicts.append(out[0] if len(out) == 1 else None)
    return verdicts


CODE_RE = re.compile(r"^\s*(?:smtp;\s*)?([245])\d\d(?:[ -]|$)")
STATUS_RE = re.compile(r"(?<![\d.])([245])\.\d{1,3}\.\d{1,3}(?![\d.]*\d)")


def naive(inp):
    """The naive rule: a 4xx code (else a 4.x.x status) is retried; 5xx (else 5.x.x) gives up and
    suppresses the recipient. With neither, the failure is retried and nothing is suppressed. An SES
    bounce event is read from its diagnostic's codes, else from its bounce type (Permanent = 5)."""
    digit = None
    if "event" in inp:
        ev = inp["event"]
        text = ev.get("diagnostic") or ""
        m = CODE_RE.match(text) or STATUS_RE.search(text)
        if m:
            digit = m.group(1)
        elif ev.get("bounce_type") == "Permanent":
            digit = "5"
        elif ev.get("bounce_type") == "Transient":
            digit = "4"
    else:
        reply = inp.get("reply") or ""
        if inp.get("code") is not None:
            digit = str(inp["code"])[0]
        elif CODE_RE.match(reply):
            digit = CODE_RE.match(reply).group(1)
        elif inp.get("status"):
            digit = inp["status"][0]
        elif STATUS_RE.search(reply):
            digit = STATUS_RE.search(reply).group(1)
    permanent = digit == "5"
    return {"retryable": not permanent, "suppress_recipient": permanent}


def ratio(num, den):
    return f"{num / den:.3f} ({num}/{den})" if den else "  n/a  (0/0)"


def measures(rows, key):
    """rows: (entry, verdict-like dict). Returns the three measures as (num, den) pairs."""
    retry = sum(1 for e, v in rows if v is not None and v["retryable"] == e["label"]["retry"])
    supp = [(e, v) for e, v in rows if v is not None and v["suppress_recipient"]]
    judged = [e for e, _ in supp if e["label"]["dead"] is not None]
    prec = sum(1 for e in judged if e["label"]["dead"])
    dead = [(e, v) for e, v in rows if e["label"]["dead"] is True]
    rec = sum(1 for _, v in dead if v is not None and v["suppress_recipient"])
    return {"retry": (retry, len(rows)), "precision": (prec, len(judged)), "recall": (rec, len(dead))}


def print_measures(title, rows_courier, rows_naive):
    c, n = measures(rows_courier, "courier"), measures(rows_naive, "naive")
    print(f"\n{title}: {len(rows_courier)} entries")
    print(f"  {'measure':<22} {'Courier':<22} {'naive rule':<22} goal")
    names = {"retry": "retry decision", "precision": "suppression precision",
             "recall": "suppression recall"}
    for k in ("retry", "precision", "recall"):
        print(f"  {names[k]:<22} {ratio(*c[k]):<22} {ratio(*n[k]):<22} >= {GOALS[k]:.2f}")


def clip(text, width=100):
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 3] + "..."


def entry_text(e):
    inp = e["input"]
    if "event" in inp:
        ev = inp["event"]
        return f"[SES {ev.get('bounce_type')}/{ev.get('bounce_subtype')}] {ev.get('diagnostic') or ''}"
    parts = [str(inp[k]) for k in ("code", "status") if inp.get(k) is not None]
    return " ".join(parts + [inp.get("reply") or ""])


def label_str(e):
    lab = e["label"]
    dead = {True: "dead", False: "alive", None: "n/a"}[lab["dead"]]
    return f"retry={'y' if lab['retry'] else 'n'} {dead} {lab['class']}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.environ.get("COURIERCTL", DEFAULT_BIN))
    ap.add_argument("--corpus", default=DEFAULT_CORPUS)
    args = ap.parse_args()
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends quietly
    if not (os.path.isfile(args.bin) and os.access(args.bin, os.X_OK)):
        die(f"{args.bin} is missing: run `cargo build -p courierctl` first")
    entries = load_corpus(args.corpus)
    verdicts = run_classifier(args.bin, [e["input"] for e in entries])
    naives = [naive(e["input"]) for e in entries]

    print(f"Courier classifier on the evaluation corpus ({os.path.relpath(args.corpus, ROOT)}):")
    print("retry decision = the verdict's `retryable` agrees with the label; suppression precision ="
          " of suppressed\nreplies whose label says dead or alive, the dead ones (\"filtered\" and"
          " \"suspended\" labels count\nneither way); suppression recall = of dead addresses, the"
          " suppressed ones.")
    for split in SPLITS + ("all",):
        idx = [i for i, e in enumerate(entries) if split == "all" or e["split"] == split]
        if idx:
            print_measures(split, [(entries[i], verdicts[i]) for i in idx],
                           [(entries[i], naives[i]) for i in idx])

    # What follows shows single entries: never the sealed ones.
    shown = [(e, v) for e, v in zip(entries, verdicts) if e["split"] != SEALED]
    sealed = len(entries) - len(shown)
    if sealed:
        print(f"\n({sealed} sealed entries: scored above, left out of everything below)")

    # Confusion table (dev and validation): rows = label class, columns = Courier's class.
    conf = defaultdict(Counter)
    for e, v in shown:
        conf[e["label"]["class"]][v["class"] if v else "(error)"] += 1
    cols = [c for c in CLASSES + ("(error)",) if any(conf[r][c] for r in conf)]
    rows = [c for c in CLASSES if c in conf]
    print("\nConfusion (dev and validation): rows = label class, columns = Courier's class")
    head = "label / courier"
    print(f"  {head:<21}" + "".join(f"{SHORT[c]:>6}" for c in cols) + "   total  agree")
    for r in rows:
        total = sum(conf[r].values())
        print(f"  {r:<21}" + "".join(f"{conf[r][c] or '.':>6}" for c in cols)
              + f"   {total:>5}  {conf[r][r] / total:.2f}")
    agree = sum(conf[r][r] for r in rows)
    print(f"  class agreement: {ratio(agree, len(shown))}")
    print("  columns: " + ", ".join(f"{SHORT[c]}={c}" for c in cols))

    def line(e, v):
        cls = f"{v['class']} ({v['rule']})" if v else "(refused)"
        return (f"  {e['id']} [{e['split']}] {clip(entry_text(e))}\n"
                f"      label: {label_str(e)} | courier: {cls}"
                + (f" retryable={'y' if v['retryable'] else 'n'}" if v else ""))

    retry_bad = [(e, v) for e, v in shown
                 if v is None or v["retryable"] != e["label"]["retry"]]
    print(f"\nRetry-decision disagreements ({len(retry_bad)}):")
    for e, v in retry_bad:
        print(line(e, v))
    fp = [(e, v) for e, v in shown
          if v and v["suppress_recipient"] and e["label"]["dead"] is False]
    fn = [(e, v) for e, v in shown
          if e["label"]["dead"] is True and not (v and v["suppress_recipient"])]
    print(f"\nSuppressed but the address is not dead ({len(fp)}):")
    for e, v in fp:
        print(line(e, v))
    print(f"\nDead address not suppressed ({len(fn)}):")
    for e, v in fn:
        print(line(e, v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
