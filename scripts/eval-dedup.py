#!/usr/bin/env python3
"""Drop the candidates of a collection round that repeat a reply already held: the classifier's
fixture corpus, the evaluation corpus, or an earlier candidate of the same run. The rule is the
eval README's *Deduplication*. Reports only ids on stderr (never a corpus entry's text, so that
the sealed split stays unseen).

Usage: scripts/eval-dedup.py candidates.jsonl [more.jsonl ...] > kept.jsonl
"""
import difflib
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "shared/core/tests/fixtures/smtp_replies.jsonl"
CORPUS = ROOT / "shared/core/tests/fixtures/eval/corpus.jsonl"
KEY = ["sender", "recipient", "relay", "helo", "client", "quota", "spam", "dmarc", "spf", "dkim", "ptr", "virus"]
def full(inp):
    if "event" in inp:
        ev = inp["event"]; return None, None, ev.get("diagnostic") or ""
    code = inp.get("code"); st = inp.get("status"); r = inp.get("reply") or ""
    m = re.match(r"^\s*([245])\d\d[ -]", r)
    if code is None and m: code = int(r[:3])
    if st is None:
        m2 = re.search(r"(?<![\d.])([245]\.\d{1,3}\.\d{1,3})(?![\d.]*\d)", r)
        st = m2.group(1) if m2 else None
    return code, st, r
def norm(t):
    t = t.lower()
    t = re.sub(r"https?://\S+|\S+@\S+|<[^>]*>", " ", t)
    t = re.sub(r"\[[^\]]*\]", " ", t)
    t = re.sub(r"\S*\d\S*", " ", t)
    return " ".join(re.findall(r"\w+", t))
def keys(t):
    tl = t.lower(); return {k for k in KEY if k in tl}
def same(a, b, thr):
    (ca, sa, ta, na, ka), (cb, sb, tb, nb, kb) = a, b
    if ca and cb and str(ca)[0] != str(cb)[0]: return False
    if sa and sb and sa != sb: return False
    if ka != kb: return False
    if na == nb: return True
    if len(na) > 40 and len(nb) > 40:
        return difflib.SequenceMatcher(None, na, nb).ratio() >= thr
    return False
def rec(inp):
    c, s, t = full(inp); return (c, s, t, norm(t), keys(t))
fixtures = []
for l in open(FIXTURES):
    e = json.loads(l); fixtures.append(("fixture", rec({"reply": e["reply"]})))
corpus = []
for l in open(CORPUS):
    e = json.loads(l); corpus.append((e["id"], rec(e["input"])))
kept = []; dropped = {"fixture": 0, "corpus": 0, "self": 0}
for path in sys.argv[1:]:
    for l in open(path):
        if not l.strip(): continue
        e = json.loads(l); r = rec(e["input"])
        hit = next((i for i, x in fixtures if same(r, x, 0.90)), None)
        if hit: dropped["fixture"] += 1; print("drop", e["id"], "= fixture", file=sys.stderr); continue
        hit = next((i for i, x in corpus if same(r, x, 0.93)), None)
        if hit: dropped["corpus"] += 1; print("drop", e["id"], "= corpus", hit, file=sys.stderr); continue
        hit = next((k["id"] for k, x in kept if same(r, x, 0.93)), None)
        if hit: dropped["self"] += 1; print("drop", e["id"], "= new", hit, file=sys.stderr); continue
        kept.append((e, r))
for e, _ in kept: print(json.dumps(e, ensure_ascii=False))
print("kept", len(kept), "dropped", dropped, file=sys.stderr)
