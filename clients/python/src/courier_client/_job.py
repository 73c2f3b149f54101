"""The job contract (``EmailJob`` v1): validation as the send function's parser does it, the
idempotency helper, attachments, building a job and encoding it as an SQS body."""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import math
import re
import string
from dataclasses import dataclass
from importlib import resources
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Union

import rfc3339_validator
from jsonschema import Draft202012Validator

from ._mailbox import is_blank, mailbox_error

#: The only contract version this client writes and the parser understands.
JOB_VERSION = 1
#: At most this many recipients (to + cc + bcc) per job.
MAX_RECIPIENTS = 50
#: Subject, text and html together (or the compact JSON of template variables), in UTF-8 bytes.
MAX_BODY_BYTES = 512 * 1024
#: Longest id (``message_id``, ``campaign_id``, ``trace_id``, template id), in characters.
MAX_ID_LEN = 256
#: Longest header value or subject, in characters.
MAX_HEADER_LEN = 998
#: The largest SQS message body, in UTF-8 bytes (1 MiB).
SQS_MAX_BYTES = 1_048_576
#: The largest message body the client sends, in UTF-8 bytes (8 MiB): a body over the queue's
#: claim-check threshold goes to the payload bucket and the queue carries a pointer to it. No job
#: within the contract's limits comes near it (512 KiB of body or template variables, even with
#: every character escaped by JSON); over it, :func:`encode` refuses the job (``too_large``).
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
#: Headers a job may set (matched case-insensitively); the parser refuses every other one.
ALLOWED_HEADERS = (
    "Reply-To",
    "List-Unsubscribe",
    "List-Unsubscribe-Post",
    "In-Reply-To",
    "References",
    "X-Entity-Ref-ID",
)

#: Where attachments live in the stack's payload bucket: ``attachments/{sha256 of the content}``.
ATTACHMENT_KEY_PREFIX = "attachments/"
#: At most this many attachments per job.
MAX_ATTACHMENTS = 10
#: At most this many bytes of attachments per job, together (10 MiB).
MAX_ATTACHMENT_BYTES = 10 * 1024 * 1024
#: Longest attachment file name, in characters.
MAX_FILENAME_LEN = 255
#: File name extensions refused (matched case-insensitively): executables and scripts, the types
#: Gmail and Outlook block (``DENIED_EXTENSIONS`` in shared/core/src/job/attachment.rs).
DENIED_EXTENSIONS = frozenset(
    "ade adp apk appx bat cab chm cmd com cpl dll dmg exe hta ins iso isp jar js jse lib lnk mde "
    "msc msi msix msp mst nsh pif ps1 scr sct shb sys vb vbe vbs vxd wsc wsf wsh".split()
)
#: Content types refused (matched case-insensitively), for the same reason.
DENIED_CONTENT_TYPES = frozenset(
    (
        "application/hta",
        "application/java-archive",
        "application/x-bat",
        "application/x-msdos-program",
        "application/x-msdownload",
        "application/x-ms-installer",
        "application/x-msi",
        "application/x-sh",
        "application/x-shellscript",
        "application/vnd.microsoft.portable-executable",
    )
)

#: At most this many ``metadata`` entries.
MAX_METADATA_ENTRIES = 20
#: Longest ``metadata`` key, in characters (keys are ASCII).
MAX_METADATA_KEY_LEN = 64
#: Longest ``metadata`` value, in characters.
MAX_METADATA_VALUE_LEN = 512
#: At most this many UTF-8 bytes of ``metadata`` keys and values together.
MAX_METADATA_BYTES = 4096

#: Longest ``list_id``, in characters (list ids are ASCII).
MAX_LIST_ID_LEN = 64

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_TAB = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")
# Bidi controls, zero-width space, word joiner, BOM, line and paragraph separators
# (`is_deceptive` in shared/core/src/job/mod.rs). ZWJ and ZWNJ stay allowed.
_DECEPTIVE = re.compile(
    "[\u061c\u200b\u200e\u200f\u202a-\u202e\u2028\u2029\u2060\u2066-\u2069\ufeff]"
)
_SURROGATE = re.compile("[\ud800-\udfff]")
# What an attachment's file name may not hold: control and deceptive characters, path separators.
_FILENAME_FORBIDDEN = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200b\u200e\u200f\u202a-\u202e\u2028\u2029\u2060"
    "\u2066-\u2069\ufeff/\\\\]"
)
# RFC 6838 type-name or subtype-name (`is_media_type` in shared/core/src/job/attachment.rs).
_MEDIA_TYPE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}")
_SHA256_HEX = re.compile("[0-9a-f]{64}")
# Rust's `to_ascii_lowercase`: only A-Z change (str.lower also folds, say, the Kelvin sign to k).
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_U64_MAX = 2**64 - 1
_TEMPLATE_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*(?:/[A-Za-z0-9_-][A-Za-z0-9._-]*)*")
# `is_metadata_key` in shared/core/src/job/metadata.rs (matched with fullmatch: `$` would also
# match before a final line feed).
_METADATA_KEY = re.compile(r"[A-Za-z0-9_.:-]{1,%d}" % MAX_METADATA_KEY_LEN)
# `is_list_id` in shared/core/src/unsubscribe.rs (matched with fullmatch, as metadata keys are).
_LIST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,%d}" % (MAX_LIST_ID_LEN - 1))

_JOB_FIELDS = frozenset(
    "version message_id campaign_id trace_id priority from to cc bcc template content headers "
    "provider not_after attachments metadata list_id unsubscribe".split()
)
_ATTACHMENT_FIELDS = ("filename", "content_type", "key", "bytes", "sha256")
_REQUIRED = ("message_id", "campaign_id", "from", "to")
_PRIORITIES = ("transactional", "bulk")
_PROVIDERS = ("ses", "smtp")
_UNSUBSCRIBE_MODES = ("list", "global", "none")

_SCHEMA = json.loads(resources.files(__package__).joinpath("email-job.v1.json").read_text("utf-8"))
_SCHEMA_VALIDATOR = Draft202012Validator(
    _SCHEMA, format_checker=Draft202012Validator.FORMAT_CHECKER
)


class InvalidJob(Exception):
    """A job the send function's parser would refuse (or, with ``too_large``, the client does).

    ``code`` is the parser's rejection code (``JobError::code``: ``schema``, ``empty_field``,
    ``invalid_address``, ... see ``docs/job-contract.md``), or the client's own ``too_large``: the
    encoded job is over :data:`MAX_MESSAGE_BYTES` (8 MiB), more than the client sends even
    through the claim check. ``message`` says which field and why.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def validate(job: Any) -> None:
    """Raises :class:`InvalidJob` with the code the send function's parser gives `job`.

    The checks run in the parser's order: an object, its ``version``, the structure (types,
    unknown fields, enum values, the RFC 3339 ``not_after``, required fields: all ``schema``),
    then the rules of ``EmailJob::validate``: ids, ``from``, recipients, headers, template or
    content, attachments, metadata, ``list_id``, ``unsubscribe``. The published JSON Schema runs
    last as a net: it states no rule the parser lacks.
    """
    if not isinstance(job, dict):
        raise InvalidJob("not_an_object", f"job must be a JSON object, found {type(job).__name__}")
    if "version" not in job:
        raise InvalidJob("missing_version", "field `version` is missing")
    version = job["version"]
    if type(version) is not int or version != JOB_VERSION:
        raise InvalidJob(
            "unknown_version",
            f"unknown contract version {version!r}; this client writes {JOB_VERSION}",
        )
    _check_structure(job)
    _check_rules(job)
    error = next(iter(_SCHEMA_VALIDATOR.iter_errors(job)), None)
    if error is not None:
        raise InvalidJob("schema", f"job does not match the contract: {error.message}")


def _schema_error(message: str) -> InvalidJob:
    return InvalidJob("schema", f"job does not match the contract: {message}")


def _check_json(value: Any, where: str) -> None:
    """`value` is JSON as the parser can hold it: no NaN or infinity, no lone surrogate."""
    if isinstance(value, str):
        if _SURROGATE.search(value):
            raise _schema_error(f"`{where}` holds a lone surrogate")
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise _schema_error(f"`{where}` has a key that is not a string: {key!r}")
            _check_json(key, where)
            _check_json(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_json(item, f"{where}[{i}]")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise _schema_error(f"`{where}` is not a finite number")
    elif not (value is None or isinstance(value, (bool, int))):
        raise _schema_error(f"`{where}` is not a JSON value: {type(value).__name__}")


def _expect(value: Any, kind: type, where: str, nullable: bool = False) -> None:
    if nullable and value is None:
        return
    if not isinstance(value, kind):
        raise _schema_error(f"`{where}` must be {'null or ' if nullable else ''}{kind.__name__}")


def _expect_fields(obj: dict, allowed: Iterable[str], required: Iterable[str], where: str) -> None:
    unknown = sorted(set(obj) - set(allowed))
    if unknown:
        raise _schema_error(f"unknown field `{unknown[0]}` in {where}")
    missing = [name for name in required if name not in obj]
    if missing:
        raise _schema_error(f"missing field `{missing[0]}` in {where}")


def _check_structure(job: dict) -> None:
    """What serde's deserialisation into ``EmailJob`` refuses, as ``schema``."""
    _check_json(job, "job")
    _expect_fields(job, _JOB_FIELDS, _REQUIRED, "the job")
    for field in ("message_id", "campaign_id", "from"):
        _expect(job[field], str, field)
    _expect(job.get("trace_id"), str, "trace_id", nullable=True)
    if job.get("priority", "transactional") not in _PRIORITIES:
        raise _schema_error(f"`priority` must be one of {', '.join(_PRIORITIES)}")
    if job.get("provider") not in _PROVIDERS + (None,):
        raise _schema_error(f"`provider` must be null or one of {', '.join(_PROVIDERS)}")
    for field in ("to", "cc", "bcc"):
        addresses = job.get(field, [])
        _expect(addresses, list, field)
        for i, address in enumerate(addresses):
            _expect(address, str, f"{field}[{i}]")
    headers = job.get("headers", {})
    _expect(headers, dict, "headers")
    for name, value in headers.items():
        _expect(value, str, f"headers.{name}")
    template = job.get("template")
    if template is not None:
        _expect(template, dict, "template")
        _expect_fields(template, ("id", "variables"), ("id",), "`template`")
        _expect(template["id"], str, "template.id")
        _expect(template.get("variables", {}), dict, "template.variables")
    content = job.get("content")
    if content is not None:
        _expect(content, dict, "content")
        _expect_fields(content, ("subject", "text", "html"), ("subject",), "`content`")
        _expect(content["subject"], str, "content.subject")
        _expect(content.get("text"), str, "content.text", nullable=True)
        _expect(content.get("html"), str, "content.html", nullable=True)
    not_after = job.get("not_after")
    _expect(not_after, str, "not_after", nullable=True)
    if not_after is not None and not rfc3339_validator.validate_rfc3339(not_after):
        raise _schema_error(f"`not_after` is not an RFC 3339 date-time: {not_after!r}")
    attachments = job.get("attachments", [])
    _expect(attachments, list, "attachments")
    for i, attachment in enumerate(attachments):
        where = f"attachments[{i}]"
        _expect(attachment, dict, where)
        _expect_fields(attachment, _ATTACHMENT_FIELDS, _ATTACHMENT_FIELDS, f"`{where}`")
        for name in ("filename", "content_type", "key", "sha256"):
            _expect(attachment[name], str, f"{where}.{name}")
        size = attachment["bytes"]
        # serde's u64: a JSON integer (not a boolean, not 20.0) from 0 to 2^64 - 1.
        if type(size) is not int or not 0 <= size <= _U64_MAX:
            raise _schema_error(f"`{where}.bytes` must be an integer from 0 to {_U64_MAX}")
    metadata = job.get("metadata", {})
    _expect(metadata, dict, "metadata")
    for key, value in metadata.items():
        _expect(value, str, f"metadata.{key}")
    _expect(job.get("list_id"), str, "list_id", nullable=True)
    if job.get("unsubscribe") not in _UNSUBSCRIBE_MODES + (None,):
        raise _schema_error(f"`unsubscribe` must be null or one of {', '.join(_UNSUBSCRIBE_MODES)}")


def _check_id(field: str, value: str) -> None:
    if is_blank(value):
        raise InvalidJob("empty_field", f"field `{field}` is empty")
    if len(value) > MAX_ID_LEN:
        raise InvalidJob("too_long", f"field `{field}` is longer than {MAX_ID_LEN} characters")
    found = _CONTROL.search(value)
    if found:
        raise InvalidJob(
            "header_injection",
            f"field `{field}` contains a control character at offset {found.start()}",
        )


def _check_header_value(field: str, value: str) -> None:
    found = _CONTROL_BUT_TAB.search(value)
    if found:
        raise InvalidJob(
            "header_injection",
            f"field `{field}` contains a control character at offset {found.start()}",
        )
    found = _DECEPTIVE.search(value)
    if found:
        raise InvalidJob(
            "deceptive_text",
            f"field `{field}` contains an invisible or direction-changing character "
            f"U+{ord(found.group()):04X} at offset {found.start()}",
        )
    if len(value) > MAX_HEADER_LEN:
        raise InvalidJob("too_long", f"field `{field}` is longer than {MAX_HEADER_LEN} characters")


def _check_mailbox(field: str, value: str) -> None:
    if is_blank(value):
        raise InvalidJob("invalid_address", f"address in `{field}` is invalid: {value!r}: empty")
    _check_header_value(field, value)
    reason = mailbox_error(value)
    if reason is not None:
        raise InvalidJob("invalid_address", f"address in `{field}` is invalid: {value!r}: {reason}")


def _check_body_size(size: int) -> None:
    if size > MAX_BODY_BYTES:
        raise InvalidJob(
            "body_too_large", f"body too large: {size} bytes (at most {MAX_BODY_BYTES} bytes)"
        )


def _check_rules(job: dict) -> None:
    """``EmailJob::validate``, in its order."""
    _check_id("message_id", job["message_id"])
    _check_id("campaign_id", job["campaign_id"])
    if job.get("trace_id") is not None:
        _check_id("trace_id", job["trace_id"])
    _check_mailbox("from", job["from"])
    lists = [(field, job.get(field, [])) for field in ("to", "cc", "bcc")]
    if not any(addresses for _, addresses in lists):
        raise InvalidJob(
            "no_recipients", "no recipients: `to`, `cc` and `bcc` hold no address between them"
        )
    count = sum(len(addresses) for _, addresses in lists)
    if count > MAX_RECIPIENTS:
        raise InvalidJob(
            "too_many_recipients", f"too many recipients: {count} (at most {MAX_RECIPIENTS})"
        )
    for field, addresses in lists:
        for i, address in enumerate(addresses):
            _check_mailbox(f"{field}[{i}]", address)
    # The parser holds headers in a BTreeMap: checked in the order of their names.
    for name, value in sorted(job.get("headers", {}).items()):
        canonical = next(
            (h for h in ALLOWED_HEADERS if h.lower() == name.lower() and name.isascii()), None
        )
        if canonical is None:
            raise InvalidJob(
                "header_not_allowed",
                f"header {name!r} is not allowed; allowed: {', '.join(ALLOWED_HEADERS)}",
            )
        _check_header_value(f"headers.{canonical}", value)
        if canonical == "Reply-To":
            _check_mailbox(f"headers.{canonical}", value)
    template, content = job.get("template"), job.get("content")
    if (template is None) == (content is None):
        found = "neither" if template is None else "both"
        raise InvalidJob(
            "template_xor_content",
            f"exactly one of `template` and `content` is required, found {found}",
        )
    if template is not None:
        _check_id("template.id", template["id"])
        if not _TEMPLATE_ID.fullmatch(template["id"]):
            raise InvalidJob("invalid_template_id", f"template id {template['id']!r} is invalid")
        _check_body_size(len(_compact_json(template.get("variables", {})).encode("utf-8")))
    else:
        _check_content(content)
    _check_attachments(job.get("attachments", []))
    _check_metadata(job.get("metadata", {}))
    list_id = job.get("list_id")
    if list_id is not None and not _LIST_ID.fullmatch(list_id):
        raise InvalidJob(
            "invalid_list_id",
            f"list_id {_quoted(list_id)} is invalid: letters, digits, `.`, `_` and `-`, starting "
            f"with a letter or digit, at most {MAX_LIST_ID_LEN} characters",
        )
    reason = _unsubscribe_refusal(job)
    if reason is not None:
        raise InvalidJob("unsubscribe_not_possible", reason)


def _check_content(content: dict) -> None:
    """``Content::validate``."""
    subject, text, html = content["subject"], content.get("text"), content.get("html")
    if is_blank(subject):
        raise InvalidJob("empty_field", "field `subject` is empty")
    _check_header_value("subject", subject)
    if not text and not html:
        raise InvalidJob("no_body", "`content` needs at least one of `text` and `html`")
    for field, body in (("text", text), ("html", html)):
        if body and "\0" in body:
            raise InvalidJob(
                "header_injection", f"field `{field}` contains a NUL at offset {body.index(chr(0))}"
            )
    _check_body_size(sum(len(part.encode("utf-8")) for part in (subject, text or "", html or "")))


def _check_attachments(attachments: list) -> None:
    """``attachment::validate``: their number and total size, then each in order."""
    size = min(sum(attachment["bytes"] for attachment in attachments), _U64_MAX)
    if len(attachments) > MAX_ATTACHMENTS or size > MAX_ATTACHMENT_BYTES:
        raise InvalidJob(
            "attachments_too_large",
            f"too many attachments or too large: {len(attachments)} files, {size} bytes "
            f"(at most {MAX_ATTACHMENTS} files, {MAX_ATTACHMENT_BYTES} bytes)",
        )
    for i, attachment in enumerate(attachments):
        _check_attachment(f"attachments[{i}]", attachment)


def _is_media_type(text: str) -> bool:
    """Whether `text` is an RFC 6838 ``type/subtype`` (no parameters), as the parser reads it."""
    kind, slash, sub = text.partition("/")
    return bool(slash) and all(_MEDIA_TYPE_NAME.fullmatch(part) for part in (kind, sub))


def _check_attachment(where: str, attachment: dict) -> None:
    """``AttachmentRef::validate``."""

    def invalid(reason: str) -> InvalidJob:
        return InvalidJob("invalid_attachment", f"attachment `{where}` is invalid: {reason}")

    name, content_type = attachment["filename"], attachment["content_type"]
    if is_blank(name) or name in (".", ".."):
        raise invalid("the file name is empty")
    if len(name) > MAX_FILENAME_LEN:
        raise invalid(f"the file name is longer than {MAX_FILENAME_LEN} characters")
    found = _FILENAME_FORBIDDEN.search(name)
    if found:
        raise invalid(
            f"the file name holds U+{ord(found.group()):04X}: no control or invisible "
            "characters, no path"
        )
    if not _is_media_type(content_type):
        raise invalid(f"content type {content_type!r} is not `type/subtype`")
    if not _SHA256_HEX.fullmatch(attachment["sha256"]):
        raise invalid("sha256 is not 64 lower-case hex digits")
    if attachment["key"] != ATTACHMENT_KEY_PREFIX + attachment["sha256"]:
        raise invalid(f"key must be {ATTACHMENT_KEY_PREFIX}{{sha256}}, found {attachment['key']!r}")
    if attachment["bytes"] == 0:
        raise invalid("the file is empty")
    extension = name.rpartition(".")[2].translate(_ASCII_LOWER) if "." in name else None
    if (
        extension in DENIED_EXTENSIONS
        or content_type.translate(_ASCII_LOWER) in DENIED_CONTENT_TYPES
    ):
        raise InvalidJob(
            "attachment_denied",
            f"attachment `{where}` ({name!r}, {content_type}) is an executable or script type, "
            "which mail providers refuse",
        )


def _check_metadata(metadata: dict) -> None:
    """``metadata::validate``: the number of entries, then each entry in key order (the parser
    holds them in a BTreeMap), then the total size."""

    def invalid(reason: str) -> InvalidJob:
        return InvalidJob("invalid_metadata", f"field `metadata` is invalid: {reason}")

    if len(metadata) > MAX_METADATA_ENTRIES:
        raise invalid(f"{len(metadata)} entries (at most {MAX_METADATA_ENTRIES})")
    size = 0
    # BTreeMap<String, _> orders keys by their UTF-8 bytes, which is code point order for str.
    for key, value in sorted(metadata.items()):
        if not _METADATA_KEY.fullmatch(key):
            raise invalid(
                f"key {_quoted(key)} must be 1 to {MAX_METADATA_KEY_LEN} ASCII letters, digits, "
                "`_`, `.`, `:` or `-`"
            )
        if len(value) > MAX_METADATA_VALUE_LEN:
            raise invalid(
                f"the value of {_quoted(key)} is longer than {MAX_METADATA_VALUE_LEN} characters"
            )
        found = _CONTROL.search(value)
        if found:
            offset = len(value[: found.start()].encode("utf-8"))  # Rust's `find`: a byte offset
            raise invalid(
                f"the value of {_quoted(key)} contains a control character at offset {offset}"
            )
        size += len(key.encode("utf-8")) + len(value.encode("utf-8"))
    if size > MAX_METADATA_BYTES:
        raise invalid(f"{size} bytes of keys and values (at most {MAX_METADATA_BYTES})")


def _unsubscribe_refusal(job: dict) -> Optional[str]:
    """``unsubscribe::refusal``: why the job's explicit ``unsubscribe`` cannot be honoured.
    ``list`` and ``global`` need exactly one recipient (the link names it), and ``list`` a list:
    the ``list_id``, else the ``campaign_id`` when it is a list id. ``none`` or no value never
    refuses."""
    asked = job.get("unsubscribe")
    if asked is None or asked == "none":
        return None
    count = sum(len(job.get(field, [])) for field in ("to", "cc", "bcc"))
    if count != 1:
        return (
            f"`unsubscribe: {asked}` needs exactly one recipient (the link names it), "
            f"found {count}"
        )
    has_list = job.get("list_id") is not None or _LIST_ID.fullmatch(job["campaign_id"])
    if asked == "list" and not has_list:
        return "`unsubscribe: list` needs a `list_id` (the `campaign_id` is not a list id)"
    return None


def _quoted(text: str) -> str:
    """`text` in double quotes, as the parser's messages write it (Rust's ``{:?}``, near enough)."""
    return json.dumps(text, ensure_ascii=False)


def _compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True)
class Attachment:
    """A file to attach: the name the recipient sees, its ``type/subtype`` and its bytes.

    The job carries only its reference (:meth:`ref`); the bytes go to the stack's payload bucket
    at ``attachments/{sha256}``, uploaded by :class:`~courier_client.CourierQueue` before the
    job is enqueued.
    """

    filename: str
    content_type: str
    content: bytes

    def __post_init__(self) -> None:
        if isinstance(self.content, (bytearray, memoryview)):
            object.__setattr__(self, "content", bytes(self.content))
        if not isinstance(self.content, bytes):
            raise TypeError(f"content must be bytes, found {type(self.content).__name__}")

    @functools.cached_property
    def sha256(self) -> str:
        """The content's SHA-256, lower-case hex."""
        return hashlib.sha256(self.content).hexdigest()

    @property
    def key(self) -> str:
        """The object's key in the payload bucket: ``attachments/`` and the content's SHA-256."""
        return ATTACHMENT_KEY_PREFIX + self.sha256

    def ref(self) -> Dict[str, Any]:
        """The job's reference to this file (``AttachmentRef::of``): ``filename``,
        ``content_type``, ``key``, ``bytes`` (the size) and ``sha256`` (lower-case hex)."""
        return {
            "filename": self.filename,
            "content_type": self.content_type,
            "key": self.key,
            "bytes": len(self.content),
            "sha256": self.sha256,
        }


class Job(dict):
    """A job (the ``EmailJob`` dict, as :func:`build_job` returns it) with the contents of its
    attachments: ``files`` maps each ``attachments/{sha256}`` key to the bytes this process
    holds for it. :class:`~courier_client.CourierQueue` uploads them before it enqueues the job.

    Everything that takes a dict takes a ``Job``, and ``json.dumps`` writes only the job.
    A plain dict whose ``attachments`` references have no ``files`` says the producer stored
    the files in the payload bucket itself.
    """

    files: Dict[str, bytes]

    def __init__(
        self, fields: Mapping[str, Any] = (), files: Optional[Mapping[str, bytes]] = None
    ) -> None:
        super().__init__(fields)
        self.files = dict(files or {})


def message_id_for(key: str) -> str:
    """The ``message_id`` for an idempotency key: ``"idem-"`` and the first 32 hex digits of the
    SHA-256 of the key's UTF-8 bytes. The same key always gives the same id, so a job sent twice
    under one key is sent (as an email) at most once."""
    return "idem-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def build_job(
    *,
    from_: str,
    to: Union[str, Sequence[str]],
    campaign_id: str,
    subject: Optional[str] = None,
    text: Optional[str] = None,
    html: Optional[str] = None,
    template: Optional[str] = None,
    variables: Optional[Mapping[str, Any]] = None,
    message_id: Optional[str] = None,
    idempotency_key: Optional[str] = None,
    cc: Sequence[str] = (),
    bcc: Sequence[str] = (),
    reply_to: Optional[str] = None,
    headers: Optional[Mapping[str, str]] = None,
    trace_id: Optional[str] = None,
    priority: str = "transactional",
    provider: Optional[str] = None,
    not_after: Optional[datetime.datetime] = None,
    attachments: Optional[Sequence[Union[Attachment, Mapping[str, Any]]]] = None,
    metadata: Optional[Mapping[str, str]] = None,
    list_id: Optional[str] = None,
    unsubscribe: Optional[str] = None,
) -> Job:
    """A validated version-1 job holding the fields given, as a :class:`Job`.

    Inline content (`subject` with `text` and/or `html`) or a stored `template` with its
    `variables`. The ``message_id`` is `message_id`, or :func:`message_id_for` of
    `idempotency_key`; giving both raises ``ValueError``, giving neither fails validation
    (``empty_field``). `reply_to` becomes the ``Reply-To`` header. `not_after` must be
    timezone-aware. `attachments` are :class:`Attachment` objects, whose references the job
    carries and whose contents go into the job's ``files`` (to be uploaded when it is sent), or
    reference dicts of files already in the payload bucket. `metadata` is up to 20 string pairs
    of yours that Courier echoes in the job's outcome events (see :class:`Outcome`); empty or
    ``None`` adds nothing. `list_id` names the mailing list the job belongs to, for one-click
    unsubscribe (letters, digits, ``.``, ``_``, ``-``, at most 64 characters; default: the
    `campaign_id` when it is one). `unsubscribe` is ``"list"``, ``"global"`` or ``"none"``:
    whether Courier adds ``List-Unsubscribe`` and what its link stops (default: ``"list"`` for
    bulk jobs with one recipient, ``"none"`` otherwise); ``"list"`` and ``"global"`` need exactly
    one recipient, and ``"list"`` a list. ``None`` adds neither field. Raises :class:`InvalidJob`
    when the parser would refuse the job.
    """
    if message_id is not None and idempotency_key is not None:
        raise ValueError("give message_id or idempotency_key, not both")
    if variables is not None and template is None:
        raise ValueError("variables need a template")
    if idempotency_key is not None:
        message_id = message_id_for(idempotency_key)
    job: dict = {
        "version": JOB_VERSION,
        "message_id": message_id or "",
        "campaign_id": campaign_id,
        "from": from_,
        "to": [to] if isinstance(to, str) else list(to),
        "priority": priority,
    }
    if cc:
        job["cc"] = list(cc)
    if bcc:
        job["bcc"] = list(bcc)
    if trace_id is not None:
        job["trace_id"] = trace_id
    if provider is not None:
        job["provider"] = provider
    all_headers = dict(headers or {})
    if reply_to is not None:
        all_headers["Reply-To"] = reply_to
    if all_headers:
        job["headers"] = all_headers
    if template is not None:
        job["template"] = (
            {"id": template}
            if variables is None
            else {"id": template, "variables": dict(variables)}
        )
    body = {"subject": subject, "text": text, "html": html}
    if any(value is not None for value in body.values()):
        job["content"] = {key: value for key, value in body.items() if value is not None}
    if not_after is not None:
        if not_after.tzinfo is None or not_after.utcoffset() is None:
            raise ValueError("not_after must be timezone-aware")
        job["not_after"] = (
            not_after.astimezone(datetime.timezone.utc).isoformat().replace("+00:00", "Z")
        )
    files: Dict[str, bytes] = {}
    if attachments:
        refs = []
        for attachment in attachments:
            if isinstance(attachment, Attachment):
                refs.append(attachment.ref())
                files[attachment.key] = attachment.content
            else:
                refs.append(dict(attachment))
        job["attachments"] = refs
    if metadata:
        # Copied when a mapping; anything else is left for validation to refuse (`schema`).
        job["metadata"] = dict(metadata) if isinstance(metadata, Mapping) else metadata
    if list_id is not None:
        job["list_id"] = list_id
    if unsubscribe is not None:
        job["unsubscribe"] = unsubscribe
    validate(job)
    return Job(job, files)


def encode(job: Mapping[str, Any]) -> str:
    """The message body of `job`: compact JSON, non-ASCII written as is, and U+FFFE and U+FFFF
    escaped (SQS refuses them raw; JSON escapes every other character SQS refuses).

    A body longer than the queue's claim-check threshold (by default ``MAX_INLINE_BYTES``, 1 MiB
    less 16 KiB) is not put on the queue as it is: :class:`~courier_client.CourierQueue` stores
    it in the payload bucket and enqueues a pointer to it. Does not validate (see
    :func:`validate`). Raises :class:`InvalidJob` with ``schema`` for a lone surrogate or a value
    JSON cannot hold, and ``too_large`` for a body over :data:`MAX_MESSAGE_BYTES`
    (8,388,608 bytes of UTF-8).
    """
    try:
        body = _compact_json(job).replace("\ufffe", "\\ufffe").replace("\uffff", "\\uffff")
        size = len(body.encode("utf-8"))
    except (TypeError, ValueError) as e:  # UnicodeEncodeError is a ValueError
        raise InvalidJob("schema", f"job cannot be written as JSON for SQS: {e}") from e
    if size > MAX_MESSAGE_BYTES:
        raise InvalidJob(
            "too_large",
            f"encoded job is {size} bytes; the client sends at most {MAX_MESSAGE_BYTES}, "
            "through the claim check above SQS's limit",
        )
    return body
