"""Mailboxes (``addr`` or ``Name <addr>``), read as the send function's parser reads them.

A port of ``shared/core/src/mailbox.rs``: RFC 5322's mailbox with its obsolete forms, read as a
PEG (ordered choice, no backtracking into a choice once it matched); the local part and domain
then checked as the ``email_address`` crate checks them, an internationalised domain through
IDNA; and UTS #39's "highly restrictive" mixed-script rule on every domain label.

Two parts are approximations, because Python's standard library has neither the Unicode
``Script_Extensions`` nor UTS #39's ``Identifier_Status`` property:

* IDNA is the ``idna`` package's (IDNA 2008 with the UTS #46 mapping), where the parser uses
  UTS #46 without IDNA 2008's stricter checks: a domain the parser takes only through the looser
  rules (a symbol or emoji label, for one) is refused here.
* A character's script is read from its Unicode name (``LATIN SMALL LETTER A`` is Latin,
  ``CJK UNIFIED IDEOGRAPH-4F8B`` is Han, ``COMBINING ...`` marks and UTS #39's inclusion
  characters go with any script), and it counts as allowed in an identifier when it is a letter,
  mark or decimal digit of a UTS #39 recommended script that NFKC leaves as is. Letters of
  scripts outside that list (Cherokee, Runic, ...) make a label "unrestricted", as in the parser.
"""

from __future__ import annotations

import unicodedata
from typing import Callable, Optional, Tuple

import idna

# Unicode White_Space, as Rust's `char::is_whitespace` and `str::trim` have it (Python's
# `str.isspace` also counts U+001C..U+001F).
WHITE_SPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)

_ATEXT_SPECIALS = frozenset("!#$%&'*+-/=?^_`{|}~")

# email_address's limits, in UTF-8 bytes.
_LOCAL_PART_MAX = 64
_DOMAIN_MAX = 254
_LABEL_MAX = 63

AddrSpec = Tuple[str, str]


def is_blank(value: str) -> bool:
    """Whether `value` is empty or only Unicode White_Space (Rust's ``trim().is_empty()``)."""
    return all(c in WHITE_SPACE for c in value)


def _is_atext(c: str) -> bool:
    """RFC 5322 ``atext``, with every non-ASCII character (the parser's rule)."""
    return (c.isascii() and c.isalnum()) or c in _ATEXT_SPECIALS or not c.isascii()


def _is_qtext(c: str) -> bool:
    """RFC 5322 ``qtext``, with the obsolete control characters."""
    code = ord(c)
    return (
        code == 33
        or 35 <= code <= 91
        or 93 <= code <= 126
        or 1 <= code <= 8
        or code in (11, 12)
        or 14 <= code <= 31
        or code == 127
    )


def _is_text(c: str) -> bool:
    """RFC 5322 ``text``: what may follow a backslash in a quoted pair."""
    code = ord(c)
    return 1 <= code <= 9 or code in (11, 12) or 14 <= code <= 127


class _Cursor:
    """The grammar over a string: a rule returns None and leaves the position where it was
    when it does not match."""

    def __init__(self, src: str) -> None:
        self.src = src
        self.pos = 0

    def peek(self) -> Optional[str]:
        return self.src[self.pos] if self.pos < len(self.src) else None

    def eat(self, want: str) -> bool:
        if self.peek() == want:
            self.pos += 1
            return True
        return False

    def eat_while(self, pred: Callable[[str], bool]) -> int:
        start = self.pos
        while self.pos < len(self.src) and pred(self.src[self.pos]):
            self.pos += 1
        return self.pos - start

    def attempt(self, rule: Callable[[], Optional[object]]) -> Optional[object]:
        """Runs `rule`; on None puts the position back."""
        start = self.pos
        out = rule()
        if out is None:
            self.pos = start
        return out

    def fws(self) -> Optional[str]:
        """Folding white space: the first space or tab (if any), the rest skipped."""
        first = self.peek() if self.peek() in (" ", "\t") else None
        self.eat_while(lambda c: c in (" ", "\t"))
        return first

    def atom(self) -> Optional[str]:
        def rule() -> Optional[str]:
            self.fws()
            start = self.pos
            return self.src[start : self.pos] if self.eat_while(_is_atext) > 0 else None

        return self.attempt(rule)

    def dot_atom(self) -> Optional[str]:
        def rule() -> Optional[str]:
            self.fws()
            start = self.pos
            if self.eat_while(_is_atext) == 0:
                return None
            while self.attempt(
                lambda: True if self.eat(".") and self.eat_while(_is_atext) > 0 else None
            ):
                pass
            return self.src[start : self.pos]

        return self.attempt(rule)

    def qcontent(self) -> Optional[str]:
        def rule() -> Optional[str]:
            ch = self.peek()
            if ch is None:
                return None
            if _is_qtext(ch) or not ch.isascii():
                self.pos += 1
                return ch
            if self.eat("\\"):
                quoted = self.peek()
                if quoted is None or not _is_text(quoted):
                    return None
                self.pos += 1
                return quoted
            return None

        return self.attempt(rule)

    def quoted_string(self) -> Optional[str]:
        def item() -> Optional[Tuple[Optional[str], str]]:
            ws = self.fws()
            ch = self.qcontent()
            return None if ch is None else (ws, ch)

        def rule() -> Optional[str]:
            if not self.eat('"'):
                return None
            out = []
            while True:
                got = self.attempt(item)
                if got is None:
                    break
                ws, ch = got
                if ws is not None:
                    out.append(ws)
                out.append(ch)
            self.fws()
            return "".join(out) if self.eat('"') else None

        return self.attempt(rule)

    def word(self) -> Optional[str]:
        got = self.quoted_string()
        return got if got is not None else self.atom()

    def phrase(self) -> Optional[str]:
        """The display name: words and dots, a space kept where white space separated them."""

        def item() -> Optional[Tuple[Optional[str], str]]:
            ws = self.fws()
            part = self.word()
            if part is None:
                part = "." if self.eat(".") else None
            return None if part is None else (ws, part)

        out = self.word()
        if out is None:
            return None
        while True:
            got = self.attempt(item)
            if got is None:
                return out
            ws, part = got
            out += (" " if ws is not None else "") + part

    def dotted(self, part: Callable[[], Optional[str]]) -> Optional[str]:
        """`part` then any number of `.part`, joined by dots."""
        out = part()
        if out is None:
            return None
        while True:
            following = self.attempt(lambda: part() if self.eat(".") else None)
            if following is None:
                return out
            out += "." + following

    def addr_spec(self) -> Optional[AddrSpec]:
        def rule() -> Optional[AddrSpec]:
            local = self.dot_atom()
            if local is None:
                local = self.quoted_string()
            if local is None:
                local = self.dotted(self.word)
            if local is None or not self.eat("@"):
                return None
            domain = self.dot_atom()
            if domain is None:
                domain = self.dotted(self.atom)
            return None if domain is None else (local, domain)

        return self.attempt(rule)

    def angle_addr(self) -> Optional[AddrSpec]:
        def rule() -> Optional[AddrSpec]:
            self.fws()
            if not self.eat("<"):
                return None
            addr = self.addr_spec()
            if addr is None or not self.eat(">"):
                return None
            self.fws()
            return addr

        return self.attempt(rule)

    def name_addr(self) -> Optional[Tuple[Optional[str], AddrSpec]]:
        def rule() -> Optional[Tuple[Optional[str], AddrSpec]]:
            name = self.phrase()
            addr = self.angle_addr()
            return None if addr is None else (name, addr)

        return self.attempt(rule)

    def mailbox(self) -> Optional[Tuple[Optional[str], AddrSpec]]:
        self.eat_while(lambda c: c in WHITE_SPACE)
        out = self.name_addr()
        if out is None:
            addr = self.addr_spec()
            out = None if addr is None else (None, addr)
        self.eat_while(lambda c: c in WHITE_SPACE)
        return out if out is not None and self.pos == len(self.src) else None


def _is_alphanumeric(c: str) -> bool:
    """Rust's ``char::is_alphanumeric`` (Alphabetic or Numeric), without Other_Alphabetic marks."""
    return unicodedata.category(c)[0] in "LN"


def _utf8_len(value: str) -> int:
    return len(value.encode("utf-8"))


def _is_valid_local_part(part: str) -> bool:
    """``email_address::EmailAddress::is_valid_local_part``."""
    if not part or _utf8_len(part) > _LOCAL_PART_MAX:
        return False
    if part.startswith('"') and part.endswith('"'):
        return len(part) > 2 and _is_qcontent(part[1:-1])
    return all(atom and all(_is_atext(c) for c in atom) for atom in part.split("."))


def _is_qcontent(part: str) -> bool:
    chars = iter(part)
    for c in chars:
        if c == "\\":
            if not "\x21" <= next(chars, "\0") <= "\x7e":
                return False
        elif not (
            c in " \t"
            or c == "\x21"
            or "\x23" <= c <= "\x5b"
            or "\x5d" <= c <= "\x7e"
            or not c.isascii()
        ):
            return False
    return True


def _is_valid_domain(domain: str) -> bool:
    """``email_address::EmailAddress::is_valid_domain`` for what the grammar can yield: dot-atoms
    (never a ``[literal]``, whose brackets are not ``atext``; the parser's IP-address fallback is
    unreachable for the same reason)."""
    if not domain or _utf8_len(domain) > _DOMAIN_MAX:
        return False
    return all(
        label
        and _is_alphanumeric(label[0])
        and _is_alphanumeric(label[-1])
        and _utf8_len(label) <= _LABEL_MAX
        and all(_is_atext(c) for c in label)
        for label in domain.split(".")
    )


def _check_domain(domain: str) -> bool:
    if _is_valid_domain(domain):
        return True
    try:
        ascii_domain = idna.encode(domain, uts46=True).decode("ascii")
    except idna.IDNAError:
        return False
    return _is_valid_domain(ascii_domain)


def _parse(value: str) -> Tuple[Optional[str], str]:
    parsed = _Cursor(value).mailbox()
    if parsed is None:
        return "Invalid input", ""
    _, (user, domain) = parsed
    if not _is_valid_local_part(user):
        return "Invalid email user", ""
    if not _check_domain(domain):
        return "Invalid email domain", ""
    return None, domain


def mailbox_error(value: str) -> Optional[str]:
    """Why `value` is not an acceptable mailbox (grammar, address, or a domain label mixing
    scripts), or None when the parser would accept it. Control and deceptive characters are the
    caller's to check first, as the parser does."""
    reason, domain = _parse(value)
    if reason is not None:
        return reason
    label = mixed_script_label(domain)
    if label is not None:
        return f"domain label {label!r} mixes scripts (UTS #39): a look-alike of another domain"
    return None


# UTS #39's recommended scripts (Table 5), by the first words of their characters' names.
_SCRIPT_PREFIXES = (
    ("CJK UNIFIED IDEOGRAPH", frozenset({"Han"})),
    ("CJK COMPATIBILITY IDEOGRAPH", frozenset({"Han"})),
    ("IDEOGRAPHIC ", frozenset({"Han"})),
    ("KATAKANA-HIRAGANA ", frozenset({"Hiragana", "Katakana"})),
    ("EXTENDED ARABIC-INDIC ", frozenset({"Arabic"})),
    ("ARABIC-INDIC ", frozenset({"Arabic"})),
) + tuple(
    (name.upper() + " ", frozenset({name}))
    for name in (
        "Arabic Armenian Bengali Bopomofo Cyrillic Devanagari Ethiopic Georgian Greek Gujarati "
        "Gurmukhi Hangul Hebrew Hiragana Kannada Katakana Khmer Lao Latin Malayalam Myanmar Oriya "
        "Sinhala Tamil Telugu Thaana Thai Tibetan"
    ).split()
)

# UTS #39 Table 3, characters allowed in identifiers with any script (Common).
_INCLUSION = frozenset(
    "'-.:\u00b7\u0375\u058a\u05f3\u05f4\u06fd\u06fe\u0f0b\u200c\u200d\u2010\u2019\u2027\u30a0\u30fb"
)

_HAN_WITH = {
    "hanb": {"Han", "Bopomofo"},
    "jpan": {"Han", "Hiragana", "Katakana"},
    "kore": {"Han", "Hangul"},
}


def _scripts(c: str) -> Optional[frozenset]:
    """The scripts of `c` (None: any script, as Common and Inherited are), or an empty set when
    `c` is not allowed in an identifier."""
    if c in _INCLUSION:
        return None
    if unicodedata.normalize("NFKC", c) != c or unicodedata.category(c) not in (
        "Lu",
        "Ll",
        "Lt",
        "Lm",
        "Lo",
        "Mn",
        "Mc",
        "Nd",
    ):
        return frozenset()
    name = unicodedata.name(c, "")
    if name.startswith("COMBINING "):
        return None
    return next(
        (scripts for prefix, scripts in _SCRIPT_PREFIXES if name.startswith(prefix)), frozenset()
    )


def _highly_restrictive(letters: str) -> bool:
    """Whether `letters` (not all ASCII) is single-script or UTS #39 "highly restrictive": one
    script, or Latin with Han and Hiragana and Katakana, Han and Bopomofo, or Han and Hangul."""
    resolved: Optional[frozenset] = None  # None: every script still possible
    without_latin = {key: True for key in _HAN_WITH}
    for c in letters:
        scripts = _scripts(c)
        if scripts is None:
            continue
        if not scripts:
            return False
        resolved = scripts if resolved is None else resolved & scripts
        if "Latin" not in scripts:
            for key, members in _HAN_WITH.items():
                without_latin[key] = without_latin[key] and bool(scripts & members)
    return resolved is None or bool(resolved) or any(without_latin.values())


def mixed_script_label(domain: str) -> Optional[str]:
    """The first label of `domain` that mixes scripts beyond UTS #39's "highly restrictive"
    level, in its Unicode form (``xn--`` labels are decoded), or None. ASCII labels are never
    flagged; hyphens and ASCII digits join labels of any script."""
    for label in domain.split("."):
        unicode = label
        if label[:4].lower() == "xn--":
            try:
                unicode = idna.decode(label)
            except idna.IDNAError:
                continue
        if unicode.isascii():
            continue
        letters = "".join(c for c in unicode if c != "-" and not ("0" <= c <= "9"))
        if not _highly_restrictive(letters):
            return unicode
    return None
