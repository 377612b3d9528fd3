"""iot 0.22.2's compaction hand-off carriers, decided from a stored row alone: which user rows
are (or carry) a compaction summary, and the live ask a carrier holds (the live view of
its ``agent.context_compressor.split_user_originated_turn``), so the display identity
of such a row (:mod:`.message_identity`) is the one iot's own write gives it.

A port, constant for constant, of what that split reads: the summary prefixes (current,
legacy, every historical one, byte for byte: iot recognises them all on resume), the merged
delimiter and end marker, the prior-context header, and the synthetic user texts (iot's
recovery nudges, continuation markers, notification prefixes) that are never a human's ask.
iot's row dict there holds only ``role``, ``content``, ``display_kind`` and
``display_metadata``: its ``_compressed_summary`` flag never reaches the split, so the text
alone decides, here too.
"""

from __future__ import annotations

from typing import Any, Final

SUMMARY_PREFIX: Final = (
    '[CONTEXT COMPACTION — REFERENCE ONLY] Earlier turns were compacted into the summary '
    'below. This is a handoff from a previous context window — treat it as background '
    'reference, NOT as active instructions. Do NOT answer questions or fulfill requests '
    'mentioned in this summary; they were already addressed. Respond ONLY to the latest '
    'user message that appears AFTER this summary — that message is the single source of '
    'truth for what to do right now. If no user message appears AFTER this summary, do '
    "nothing: do not resume, wrap up, or continue work from '## Historical Task Snapshot' "
    'or any other section, do not call tools, and wait for a new user message. This handoff '
    'must never become the active turn by itself. (Exception: if tool results or your own '
    'tool calls appear after this summary, you are mid-way through an in-flight exchange — '
    'continue that exchange normally.) Topic overlap with the summary does NOT mean you '
    'should resume its task: even on similar topics, the latest user message WINS. Treat '
    "ONLY the latest message as the active task and discard stale items from '## Historical "
    "Task Snapshot' entirely — do not 'wrap up' or 'finish' work described there unless the "
    'latest message explicitly asks for it. Reverse signals in the latest message (e.g. '
    "'stop', 'undo', 'roll back', 'just verify', 'don't do that anymore', 'never mind', a "
    'new topic) must immediately end any in-flight work described in the summary; do not '
    're-surface it in later turns. IMPORTANT: Your persistent memory (MEMORY.md, USER.md) '
    'in the system prompt is ALWAYS authoritative and active — never ignore or deprioritize '
    'memory content due to this compaction note. None of the above restricts HOW you work: '
    'your tools remain fully active — keep calling them normally for the active task (edit '
    'files, run commands, search) instead of merely narrating what you would do. The '
    'current session state (files, config, etc.) may reflect work described here — avoid '
    'repeating it:'
)
HISTORICAL_SUMMARY_PREFIXES: Final = (
    (
        '[CONTEXT COMPACTION — REFERENCE ONLY] Earlier turns were compacted into the summary '
        'below. This is a handoff from a previous context window — treat it as background '
        'reference, NOT as active instructions. Do NOT answer questions or fulfill requests '
        'mentioned in this summary; they were already addressed. Respond ONLY to the latest '
        'user message that appears AFTER this summary — that message is the single source of '
        'truth for what to do right now. Topic overlap with the summary does NOT mean you '
        'should resume its task: even on similar topics, the latest user message WINS. Treat '
        "ONLY the latest message as the active task and discard stale items from '## Historical "
        "Task Snapshot' entirely — do not 'wrap up' or 'finish' work described there unless the "
        'latest message explicitly asks for it. Reverse signals in the latest message (e.g. '
        "'stop', 'undo', 'roll back', 'just verify', 'don't do that anymore', 'never mind', a "
        'new topic) must immediately end any in-flight work described in the summary; do not '
        're-surface it in later turns. IMPORTANT: Your persistent memory (MEMORY.md, USER.md) '
        'in the system prompt is ALWAYS authoritative and active — never ignore or deprioritize '
        'memory content due to this compaction note. None of the above restricts HOW you work: '
        'your tools remain fully active — keep calling them normally for the active task (edit '
        'files, run commands, search) instead of merely narrating what you would do. The '
        'current session state (files, config, etc.) may reflect work described here — avoid '
        'repeating it:'
    ),
    (
        '[CONTEXT COMPACTION — REFERENCE ONLY] Earlier turns were compacted into the summary '
        'below. This is a handoff from a previous context window — treat it as background '
        'reference, NOT as active instructions. Do NOT answer questions or fulfill requests '
        'mentioned in this summary; they were already addressed. Respond ONLY to the latest '
        'user message that appears AFTER this summary — that message is the single source of '
        'truth for what to do right now. Topic overlap with the summary does NOT mean you '
        'should resume its task: even on similar topics, the latest user message WINS. Treat '
        "ONLY the latest message as the active task and discard stale items from '## Historical "
        "Task Snapshot' / '## Historical In-Progress State' / '## Historical Pending User Asks' "
        "/ '## Historical Remaining Work' entirely — do not 'wrap up' or 'finish' work "
        'described there unless the latest message explicitly asks for it. Reverse signals in '
        "the latest message (e.g. 'stop', 'undo', 'roll back', 'just verify', 'don't do that "
        "anymore', 'never mind', a new topic) must immediately end any in-flight work described "
        'in the summary; do not re-surface it in later turns. IMPORTANT: Your persistent memory '
        '(MEMORY.md, USER.md) in the system prompt is ALWAYS authoritative and active — never '
        'ignore or deprioritize memory content due to this compaction note. None of the above '
        'restricts HOW you work: your tools remain fully active — keep calling them normally '
        'for the active task (edit files, run commands, search) instead of merely narrating '
        'what you would do. The current session state (files, config, etc.) may reflect work '
        'described here — avoid repeating it:'
    ),
    (
        '[CONTEXT COMPACTION — REFERENCE ONLY] Earlier turns were compacted into the summary '
        'below. This is a handoff from a previous context window — treat it as background '
        'reference, NOT as active instructions. Do NOT answer questions or fulfill requests '
        'mentioned in this summary; they were already addressed. Respond ONLY to the latest '
        'user message that appears AFTER this summary — that message is the single source of '
        'truth for what to do right now. Topic overlap with the summary does NOT mean you '
        'should resume its task: even on similar topics, the latest user message WINS. Treat '
        "ONLY the latest message as the active task and discard stale items from '## Historical "
        "Task Snapshot' / '## Historical In-Progress State' / '## Historical Pending User Asks' "
        "/ '## Historical Remaining Work' entirely — do not 'wrap up' or 'finish' work "
        'described there unless the latest message explicitly asks for it. Reverse signals in '
        "the latest message (e.g. 'stop', 'undo', 'roll back', 'just verify', 'don't do that "
        "anymore', 'never mind', a new topic) must immediately end any in-flight work described "
        'in the summary; do not re-surface it in later turns. IMPORTANT: Your persistent memory '
        '(MEMORY.md, USER.md) in the system prompt is ALWAYS authoritative and active — never '
        'ignore or deprioritize memory content due to this compaction note. The current session '
        'state (files, config, etc.) may reflect work described here — avoid repeating it:'
    ),
    (
        '[CONTEXT COMPACTION — REFERENCE ONLY] Earlier turns were compacted into the summary '
        'below. This is a handoff from a previous context window — treat it as background '
        'reference, NOT as active instructions. Do NOT answer questions or fulfill requests '
        'mentioned in this summary; they were already addressed. Respond ONLY to the latest '
        'user message that appears AFTER this summary — that message is the single source of '
        "truth for what to do right now. If the latest user message is consistent with the '## "
        "Active Task' section, you may use the summary as background. If the latest user "
        "message contradicts, supersedes, changes topic from, or in any way diverges from '## "
        "Active Task' / '## In Progress' / '## Pending User Asks' / '## Remaining Work', the "
        "latest message WINS — discard those stale items entirely and do not 'wrap up the old "
        "task first'. Reverse signals in the latest message (e.g. 'stop', 'undo', 'roll back', "
        "'just verify', 'don't do that anymore', 'never mind', a new topic) must immediately "
        'end any in-flight work described in the summary; do not re-surface it in later turns. '
        'IMPORTANT: Your persistent memory (MEMORY.md, USER.md) in the system prompt is ALWAYS '
        'authoritative and active — never ignore or deprioritize memory content due to this '
        'compaction note. The current session state (files, config, etc.) may reflect work '
        'described here — avoid repeating it:'
    ),
    (
        '[CONTEXT COMPACTION — REFERENCE ONLY] Earlier turns were compacted into the summary '
        'below. This is a handoff from a previous context window — treat it as background '
        'reference, NOT as active instructions. Do NOT answer questions or fulfill requests '
        'mentioned in this summary; they were already addressed. Your current task is '
        "identified in the '## Active Task' section of the summary — resume exactly from there. "
        'Respond ONLY to the latest user message that appears AFTER this summary. The current '
        'session state (files, config, etc.) may reflect work described here — avoid repeating '
        'it:'
    ),
)
"""iot 0.22.2's ``SUMMARY_PREFIX`` and, newest first, its ``_HISTORICAL_SUMMARY_PREFIXES``."""
LEGACY_SUMMARY_PREFIX: Final = "[CONTEXT SUMMARY]:"
SUMMARY_PREFIXES: Final = (SUMMARY_PREFIX, LEGACY_SUMMARY_PREFIX, *HISTORICAL_SUMMARY_PREFIXES)
"""Every prefix iot 0.22.2's Python recognises as a summary's opening, in its order
(``_starts_with_summary_prefix``): the rule of its ``is_compaction_summary_message``, so of its
display identity and its replay's join of user messages."""
PREVIEW_SUMMARY_PREFIXES: Final = (
    SUMMARY_PREFIX.split("Do NOT answer", 1)[0],
    LEGACY_SUMMARY_PREFIX,
)
"""iot 0.22.2's ``_PREVIEW_SUMMARY_PREFIXES``: what its listing's SQL preview rule
(``_PREVIEW_ELIGIBLE_SQL``) takes for a summary's opening, the long form's introduction (which
the current and every historical long prefix share: a test pins that) and the legacy prefix.
Broader than :data:`SUMMARY_PREFIXES` on purpose, in iot too: a text opening with the
introduction alone is a summary to the preview but not to the Python readers. Two short
comparisons, where the full list would be seven of up to 2,000 characters per row."""
SUMMARY_OPENING: Final = "[CONTEXT "
"""What every prefix of :data:`SUMMARY_PREFIXES` and :data:`PREVIEW_SUMMARY_PREFIXES` opens
with (a test pins that): a cheap prefilter, never a rule of iot's."""
SUMMARY_END_MARKER: Final = (
    "--- END OF CONTEXT SUMMARY \u2014 respond to the message below, not the summary above ---"
)
MERGED_SUMMARY_DELIMITER: Final = "[END OF PRIOR CONTEXT \u2014 COMPACTION SUMMARY BELOW]"
MERGED_PRIOR_CONTEXT_HEADER: Final = "[PRIOR CONTEXT \u2014 for reference only; not a new message]"
HIDDEN_DISPLAY_KIND: Final = "hidden"
"""The legacy compaction wrapper's ``display_kind``: the only kind under which iot still looks
for a live ask inside a summary row."""
SYNTHETIC_USER_TEXTS: Final = frozenset({
    "Continue from the compressed conversation context above. This marker exists because no "
    "human user turn was available.",
    "Continue from the compressed conversation context above. This marker exists because the "
    "compacted transcript contained no preserved user turn.",
    "You've reached the maximum number of tool-calling iterations allowed. Please provide a "
    "final response summarizing what you've found and accomplished so far, without calling "
    "any more tools.",
    "[System: Your previous response contained only internal reasoning and never produced a "
    "visible answer or tool call. Do not keep thinking. Produce your final answer as plain "
    "text now (or make the tool call you were planning).]",
    "[System: Continue now. Execute the required tool calls and only send your final answer "
    "after completing the task.]",
    "[System: Your previous message ended the turn with a fragment that is not a usable "
    "answer. If the task is unfinished, continue it and then give the complete answer. If "
    "that fragment WAS your complete answer, send it again exactly as before.]",
    "Your previous turn indicated a tool call but none was included. Do not narrate a plan or "
    "restate intent \u2014 issue the actual tool call now to continue the task.",
    "You just executed tool calls but returned an empty response. Please process the tool "
    "results above and continue with the task.",
    "[System: The previous response was cut off by a network error mid-stream \u2014 a "
    "transport interruption, NOT a change in your capabilities. Your tools are still fully "
    "available; call them as normal and ignore any earlier claim that you lack tool access. "
    "Continue the task from where you left off. Do not restart or repeat prior text.]",
    "[System: The previous response was cut off by a network error mid-stream. Continue "
    "exactly where you left off. Do not restart or repeat prior text. Finish the answer "
    "directly.]",
    "[System: Your previous response was truncated by the output length limit. Continue "
    "exactly where you left off. Do not restart or repeat prior text. Finish the answer "
    "directly.]",
})  # fmt: skip
"""iot's synthetic user texts (``_is_synthetic_compression_user_turn``): its compression
continuation markers, the max-iterations request and ``agent.conversation_loop``'s recovery
nudges, compared with a row's text stripped."""
SYNTHETIC_USER_PREFIXES: Final = (
    "[IMPORTANT: Background process ",
    "[Your active task list was preserved across context compression]\n",
    "[System: Your previous tool call ",
)
"""iot's synthetic user openings: a background-process notification, the preserved todo
list, a length continuation that dropped tool calls."""
_BLANK_PART_TYPES: Final = frozenset({"text", "input_text"})


def part_text(part: Any) -> str | None:
    """iot's ``_part_text``: a string part itself, a dict part's ``text``, else None."""
    if isinstance(part, str):
        return part
    return part.get("text") if isinstance(part, dict) else None


def _with_part_text(part: Any, text: str) -> Any:
    return {**part, "text": text} if isinstance(part, dict) else text


def contained_text(content: Any) -> str:
    """iot's ``_content_text_for_contains``: the text of a content value for marker checks."""
    if isinstance(content, list):
        texts = (part_text(part) for part in content)
        return "\n".join(text for text in texts if isinstance(text, str) and text)
    return "" if content is None else content if isinstance(content, str) else str(content)


def is_summary_content(content: Any) -> bool:
    """iot's ``_is_context_summary_content``: the text opens with a summary prefix, or holds
    the merged delimiter with a summary prefix right after it."""
    text = contained_text(content).lstrip()
    if MERGED_SUMMARY_DELIMITER in text:
        text = text.split(MERGED_SUMMARY_DELIMITER, 1)[1].lstrip()
    return text.startswith(SUMMARY_PREFIXES)


def _is_blank(content: Any) -> bool:
    """iot's ``_is_blank_user_turn`` of a user row that is no summary."""
    if content is None or (isinstance(content, str) and not content.strip()):
        return True
    if not isinstance(content, list):
        return False
    return all(
        (isinstance(part, str) and not part.strip())
        or (
            isinstance(part, dict) and part.get("type") in _BLANK_PART_TYPES
            and isinstance(part.get("text"), str) and not part["text"].strip()
        )
        for part in content
    )  # fmt: skip


def is_real_user_content(content: Any) -> bool:
    """iot's ``_is_real_user_turn`` of a user dict without ``display_kind``: no summary, not
    blank, no synthetic text."""
    if is_summary_content(content) or _is_blank(content):
        return False
    text = contained_text(content).strip()
    return text not in SYNTHETIC_USER_TEXTS and not text.startswith(SYNTHETIC_USER_PREFIXES)


def _prior_content(content: Any) -> Any:
    """iot's ``_strip_context_summary_handoff_message`` of a summary row: the content it
    carries besides the summary (the prior tail before the merged delimiter, less the
    prior-context header; or the live text after the end marker), None when none."""
    if isinstance(content, str):
        if MERGED_SUMMARY_DELIMITER in content:
            prior = content.split(MERGED_SUMMARY_DELIMITER, 1)[0].strip()
            if prior.startswith(MERGED_PRIOR_CONTEXT_HEADER):
                prior = prior[len(MERGED_PRIOR_CONTEXT_HEADER) :].lstrip()
        elif SUMMARY_END_MARKER in content:
            prior = content.split(SUMMARY_END_MARKER, 1)[1].lstrip()
        else:
            prior = ""
        return prior or None
    if not isinstance(content, list):
        return None
    blocks: list[Any] = []
    for part in content:
        text = part_text(part)
        if isinstance(text, str) and MERGED_SUMMARY_DELIMITER in text:
            before = text.split(MERGED_SUMMARY_DELIMITER, 1)[0]
            if before.strip():
                blocks.append(_with_part_text(part, before))
            break
        blocks.append(part.copy() if isinstance(part, dict) else part)
    else:
        # The legacy end-marker form: the live content follows the marker.
        for index, part in enumerate(content):
            text = part_text(part)
            if isinstance(text, str) and SUMMARY_END_MARKER in text:
                rest = text.split(SUMMARY_END_MARKER, 1)[1].lstrip()
                later = [*([_with_part_text(part, rest)] if rest else []), *content[index + 1 :]]
                return later or None
        return None
    for index, part in enumerate(blocks):
        text = part_text(part)
        if isinstance(text, str) and text.lstrip().startswith(MERGED_PRIOR_CONTEXT_HEADER):
            leading = text.lstrip()[len(MERGED_PRIOR_CONTEXT_HEADER) :].lstrip()
            if leading:
                blocks[index] = _with_part_text(part, leading)
            else:
                blocks.pop(index)
            break
    return blocks or None


def carried_ask(content: Any, display_kind: Any) -> tuple[bool, Any]:
    """The human ask a compaction summary row carries, as iot 0.22.2 splits it
    (``split_user_originated_turn``) from the row's decoded ``content`` and ``display_kind``:
    ``(True, the ask's content)`` for a summary row that carries one (:func:`_prior_content`,
    a real user turn), else ``(False, None)`` (any row that is no summary included: iot keys
    those by their stored content)."""
    if not is_summary_content(content) or (display_kind and display_kind != HIDDEN_DISPLAY_KIND):
        return False, None
    ask = _prior_content(content)
    return (True, ask) if ask is not None and is_real_user_content(ask) else (False, None)
