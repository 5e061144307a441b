"""Chat messages as turns: the OpenAI-style `{"role", "content"}` shape agents hold.

A message is a mapping with a `role` (or, failing that, a `content`); `message_fields` turns it
into the fields of a turn dict (see `etamem.ingest.inputs`):

- `role` -> `speaker` (`user`, `assistant`, `tool`, ...); `system` / `developer` messages are
  skipped unless `keep_system` (they are instructions, not what anyone said);
- `content` -> `text`: a string, or a list of parts whose text parts (`{"type": "text" |
  "input_text" | "output_text", "text": ...}` or bare strings) are joined by newlines; other
  parts (images, audio, files, refusals) are left out; a message with no text is skipped
  (e.g. an assistant message that only calls tools);
- `id` -> `turn_id`; `timestamp` or `created_at` (ISO 8601, the other forms of
  `etamem.ingest.timeparse`, or epoch seconds) -> `timestamp`;
- `name` -> `extra["name"]` (the rule extractor writes it in place of the role), `tool_call_id`
  -> `extra["tool_call_id"]`; `session_id`, `extra`, `metadata` and `space` as for turns;
- OpenAI fields that carry no text (`type`, `tool_calls`, `function_call`, `refusal`, `audio`,
  `status`, `annotations`) are accepted and dropped. Any other key is an error.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Mapping

from etamem.config import shown

MESSAGE_KEYS = frozenset({"role", "content", "name", "id", "timestamp", "created_at", "session_id", "extra", "space",
                          "metadata"})
DROPPED_KEYS = frozenset({"type", "tool_calls", "tool_call_id", "function_call", "refusal", "audio", "status",
                          "annotations"})
INSTRUCTION_ROLES = ("system", "developer")
TEXT_PARTS = ("text", "input_text", "output_text")


def is_message(item: Mapping[str, Any]) -> bool:
    """Whether a dict is a chat message (it has `role`, or `content` without `text`)."""
    return "role" in item or ("content" in item and "text" not in item)


def message_text(content: Any, where: str) -> str:
    """The text of a message's `content` (a string or a list of parts); ValueError naming
    `where` for any other shape."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, (list, tuple)):
        raise ValueError(f"{where}: expected text or a list of content parts, got {shown(content)}")
    texts = []
    for j, part in enumerate(content):
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, Mapping):
            if part.get("type", "text") in TEXT_PARTS:
                text = part.get("text")
                if not isinstance(text, str):
                    raise ValueError(f"{where}[{j}].text: expected a string, got {shown(text)}")
                texts.append(text)
        else:
            raise ValueError(f"{where}[{j}]: expected a content part (a dict) or a string, got {shown(part)}")
    return "\n".join(t for t in texts if t.strip())


def epoch_or_value(value: Any, where: str) -> Any:
    """Epoch seconds (int or float, as OpenAI's `created_at`) as an aware UTC datetime; any
    other value unchanged (parsed later as a timestamp)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(value, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            raise ValueError(f"{where}: epoch seconds {shown(value)} out of range") from None
    return value


def message_fields(item: Mapping[str, Any], where: str, *, keep_system: bool = False) -> dict[str, Any] | None:
    """The turn fields of one message (keys of `etamem.ingest.inputs`), or None when it is skipped
    (an instruction role without `keep_system`, or no text). ValueError naming `where` and the
    field for what cannot be read."""
    unknown = set(item) - MESSAGE_KEYS - DROPPED_KEYS
    if unknown:
        extra_hint = " (a message has role and content; a turn has speaker and text: not both)" \
            if unknown & {"speaker", "text", "turn_id"} else ""
        raise ValueError(f"{where}: unknown field(s) {sorted(map(str, unknown))} in a chat message{extra_hint}; "
                         f"allowed: {sorted(MESSAGE_KEYS)}")
    role = item.get("role")
    if not isinstance(role, str) or not role.strip():
        raise ValueError(f"{where}.role: expected a non-empty string (user, assistant, tool, ...), got {shown(role)}")
    if role.strip().lower() in INSTRUCTION_ROLES and not keep_system:
        return None
    text = message_text(item.get("content"), f"{where}.content")
    if not text.strip():
        return None
    if "timestamp" in item and "created_at" in item:
        raise ValueError(f"{where}: give timestamp or created_at, not both")
    when_key = "created_at" if "created_at" in item else "timestamp"
    extra = item.get("extra")
    if extra is not None and not isinstance(extra, Mapping):
        raise ValueError(f"{where}.extra: expected a dict, got {type(extra).__name__}")
    extra = dict(extra or {})
    for key in ("name", "tool_call_id"):
        if item.get(key) is not None:
            if not isinstance(item[key], str):
                raise ValueError(f"{where}.{key}: expected a string, got {shown(item[key])}")
            extra[key] = item[key]
    fields = {"speaker": role.strip(), "text": text, "turn_id": item.get("id"), "session_id": item.get("session_id"),
              "timestamp": epoch_or_value(item.get(when_key), f"{where}.{when_key}"), "extra": extra}
    if item.get("space") is not None:
        fields["space"] = item["space"]
    if item.get("metadata") is not None:
        fields["metadata"] = item["metadata"]
    return fields
