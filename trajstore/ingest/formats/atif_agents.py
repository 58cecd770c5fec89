"""What the agents that write ATIF files put in them beyond the format itself: which text of an
agent step the model really wrote, whether earlier reasoning was sent back to it, whether tool
definitions were sent, and what says the run finished (ATIF has no status field).

Known producers (``agent.name``):

* ``terminus-2`` (Harbor's Terminus-2): the model writes one JSON object (``agent.extra.parser``
  ``json``, the default) or XML response per call (``analysis``, ``plan``, ``commands``,
  ``task_complete``); the ATIF step keeps ``"Analysis: ...\\nPlan: ..."`` as its message and the
  commands as ``bash_command`` / ``mark_task_complete`` tool calls, which were never native tool
  calls (Terminus-2 sends no tool definitions). The action is that response rebuilt from the
  parsed fields (flagged ``action_text``); a step whose message is the raw response (a parse
  error, or ``raw_content`` mode) is kept as it is. Terminus-2 sends no system message (its
  instructions are the first user message) and does not send earlier reasoning back (its
  ``interleaved_thinking`` option is off by default and not recorded in the file). The run
  finished only when ``mark_task_complete`` was confirmed: called in two agent steps in a row.
  A harness note pointing to the summarisation sub-agents' files marks a context rewrite: the
  calls after it were sent the first message, the questions sub-agent's prompt and its questions,
  then the handoff (``_summarize``).
* ``terminus-2-summarization-*`` (its summarisation sub-agents): free-text calls kept as they
  are; steps copied from the main agent (``is_copied_context``, or agent steps without metrics
  before the sub-agent's own call) are context, read as Terminus-2 steps, never its calls;
  finished with a final answer (a last agent step without tool calls).
* ``openhands`` (Harbor's converter of OpenHands V0 event logs): an agent step's message is the
  OpenHands event's ``message`` (a summary such as ``"I edited the file /app/hello.txt."``), not
  the text the model wrote with its tool call, and the arguments are re-serialized from their
  parsed JSON: tool-call steps are stored with their tool call and without that summary,
  flagged ``action_text``. ``agent.tool_definitions`` holds the tools sent natively. Finished
  with a ``finish`` tool call.
* any other agent: steps as logged; finished when the last step is an agent step without tool
  calls (a final answer); whether reasoning was sent back is not known (kept, flagged).

Every agent: ``source: system`` steps after the conversation began are the harness's notes
(Harbor writes e.g. "Performed context summarization and handoff to continue task.", or the
OpenHands converter's "Added workspace context"), not messages the model was sent in that form.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

TRUNCATING_EXCEPTIONS = ("AgentTimeoutError", "ContextLengthExceededError", "OutputLengthExceededError")
"""Harbor exceptions (``result.json`` ``exception_info.exception_type``) that cut the agent's run
at a limit: stored ``truncated``."""
AFTER_AGENT_EXCEPTIONS = ("Verifier", "RewardFile", "AddTestsDir", "DownloadVerifier")
"""Prefixes of Harbor exceptions raised after the agent ran (grading): no bearing on its status."""

OPENHANDS_EVENT_MESSAGES = ("I edited the file ", "Running command: ", "Running Python code interactively: ",
                            "Reading file: ", "I am thinking...", "All done! What's next on the agenda?",
                            "I am interacting with the browser")
"""How OpenHands V0 words an action event's ``message`` (its summary of the action, never model
output); Harbor's converter logs it as the agent step's message."""


@dataclass
class AgentText:
    """The text of one agent step as stored: `content`, whether its tool calls are already written
    in it (`calls_in_content`: the model wrote them as text) and, when the content is a
    reconstruction rather than what the model wrote, `rebuilt` = True."""

    content: str
    calls_in_content: bool = False
    rebuilt: bool = False


def _calls(step: dict[str, Any]) -> list[dict[str, Any]]:
    return [tc for tc in step.get("tool_calls") or [] if isinstance(tc, dict)]


def _call_names(step: dict[str, Any]) -> list[str]:
    return [str(tc.get("function_name")) for tc in _calls(step)]


def _agent_steps(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in steps if s.get("source") == "agent"]


class Conventions:
    """The generic reading of an ATIF file (an agent this module knows nothing about)."""

    name: ClassVar[str] = "generic"
    reasoning_sent_back: ClassVar[bool | None] = None
    """Whether the agent sends a call's reasoning back in later calls; None = not known."""
    native_tools: ClassVar[bool] = True
    """Whether the agent's tool calls are native (so tool definitions were sent with each call)."""
    system_prompt_expected: ClassVar[bool] = True
    notes_stand_for_context: ClassVar[bool] = True
    """Whether the harness notes may stand for text the model was sent (flagged ``harness_notes``)."""

    rewrites_at_subagent_note: ClassVar[bool] = False
    """Whether a harness note pointing to sub-agent files (``subagent_trajectory_ref``) marks a
    context rewrite: the calls after it were sent another context (see :meth:`context_after_rewrite`)."""

    def __init__(self, agent: dict[str, Any]):
        self.agent = agent

    def replayed(self, steps: list[dict[str, Any]]) -> list[bool]:
        """Per step: whether it is context copied from another log (``is_copied_context``), never
        a model call of this file (its calls are stored once, in the file that made them)."""
        return [bool(s.get("is_copied_context")) for s in steps]

    def context_after_rewrite(self, first: dict[str, Any] | None, note: dict[str, Any],
                              read_ref: Any) -> tuple[list[dict[str, Any]], str | None]:
        """The messages (``{"role", "content"}``) the agent's context was reset to at the harness
        note `note` (before the steps after it), given the conversation's `first` step and
        `read_ref` (a sub-agent's file by the ref's ``trajectory_path``: its parsed JSON or None),
        and a fidelity gap when they cannot all be rebuilt. Only read when
        :attr:`rewrites_at_subagent_note`."""
        return [], None

    def agent_text(self, step: dict[str, Any], message: str) -> AgentText:
        """The stored text of an agent step whose message is `message`."""
        return AgentText(message)

    def rebuilt_reason(self) -> str:
        """Why the agent steps marked ``rebuilt`` are not what the model wrote (the ``action_text`` flag)."""
        return ""

    def finished(self, steps: list[dict[str, Any]]) -> tuple[bool, str]:
        """(whether the log shows the run finished, the evidence either way, one line)."""
        last = steps[-1] if steps else {}
        if last.get("source") == "agent" and not _calls(last):
            return True, "the last step is the agent's final answer (no tool call)"
        return False, "the log ends without a final answer from the agent (ATIF records no status)"


class Terminus2(Conventions):
    name = "terminus-2"
    reasoning_sent_back = False
    native_tools = False
    system_prompt_expected = False
    notes_stand_for_context = False  # Terminus-2's only note marks a summarisation, sent to no model

    @property
    def parser(self) -> str:
        extra = self.agent.get("extra") if isinstance(self.agent.get("extra"), dict) else {}
        return "xml" if extra.get("parser") == "xml" else "json"

    def rebuilt_reason(self) -> str:
        return (f"Terminus-2 ATIF steps keep the parsed analysis and plan and the commands as tool calls, not the "
                f"{self.parser.upper()} response the model wrote: each such action is that response rebuilt from "
                "them (field order and layout as Terminus-2's prompt shows them; spacing, number formats and "
                "anything the parser dropped are not known)")

    def agent_text(self, step: dict[str, Any], message: str) -> AgentText:
        if not _calls(step) and not message.startswith(("Analysis: ", "Plan: ")):
            return AgentText(message)  # the raw response: a parse error, or raw_content mode
        analysis, plan = "", message
        if message.startswith("Analysis: "):
            analysis, _, plan = message[len("Analysis: "):].partition("\nPlan: ")
        elif message.startswith("Plan: "):
            plan = message[len("Plan: "):]
        commands = [tc.get("arguments") if isinstance(tc.get("arguments"), dict) else {} for tc in _calls(step)
                    if tc.get("function_name") == "bash_command"]
        done = "mark_task_complete" in _call_names(step)
        text = (_xml_response(analysis, plan, commands, done) if self.parser == "xml"
                else _json_response(analysis, plan, commands, done))
        return AgentText(text, calls_in_content=True, rebuilt=True)

    def finished(self, steps: list[dict[str, Any]]) -> tuple[bool, str]:
        agent = [s for s in _agent_steps(steps) if not s.get("is_copied_context")]
        marked = ["mark_task_complete" in _call_names(s) for s in agent]
        if len(marked) >= 2 and marked[-1] and marked[-2]:
            return True, "mark_task_complete confirmed (called in the last two agent steps)"
        if marked and marked[-1]:
            return False, ("mark_task_complete called but not confirmed: the run stopped while Terminus-2 asked "
                           "the agent to confirm")
        return False, ("no mark_task_complete: the run stopped before the agent finished (a timeout, the turn "
                       "limit or an error; Harbor records which in the trial's result.json)")


    rewrites_at_subagent_note = True

    def context_after_rewrite(self, first: dict[str, Any] | None, note: dict[str, Any],
                              read_ref: Any) -> tuple[list[dict[str, Any]], str | None]:
        # Terminus-2 ``_summarize``: chat = [messages[0], {user: question_prompt}, {assistant:
        # model_questions}]; the handoff prompt follows as the next user step. The question prompt
        # and the questions are the questions sub-agent's (its first user step, its reply).
        out = [{"role": "user", "content": first.get("message")}] if first else []
        refs = [r for res in (note.get("observation") or {}).get("results") or [] if isinstance(res, dict)
                for r in (res.get("subagent_trajectory_ref") or []) if isinstance(r, dict)]
        ref = next((r for r in refs if str(r.get("session_id") or r.get("trajectory_path") or "")
                    .removesuffix(".json").endswith("-questions")), None)
        doc = read_ref(ref) if ref else None
        steps = doc.get("steps") if isinstance(doc, dict) and isinstance(doc.get("steps"), list) else []
        ask = next((s for s in steps if isinstance(s, dict) and s.get("source") == "user"), None)
        said = next((s for s in reversed(steps) if isinstance(s, dict) and s.get("source") == "agent"), None)
        if ask is None or said is None:
            where = ref.get("trajectory_path") if ref else "no questions sub-agent named by the note"
            return out, (f"Terminus-2 reset the context at its summarisation (step {note.get('step_id')}) to the "
                         f"first message, the question prompt and the model's questions, which are in the "
                         f"questions sub-agent's file ({where}), not read: the calls after it are stored with "
                         "the first message and the handoff only")
        return out + [{"role": "user", "content": ask.get("message")},
                      {"role": "assistant", "content": said.get("message")}], None


class Terminus2Subagent(Terminus2):
    name = "terminus-2-summarization"
    rewrites_at_subagent_note = False

    def replayed(self, steps: list[dict[str, Any]]) -> list[bool]:
        # the sub-agent's own call(s) carry metrics; the main agent's steps before them, copied
        # from its history (marked is_copied_context by newer Harbor), carry none
        own = [s.get("source") == "agent" and isinstance(s.get("metrics"), dict) and not s.get("is_copied_context")
               for s in steps]
        last_own = max((i for i, o in enumerate(own) if o), default=-1)
        return [bool(s.get("is_copied_context")) or (s.get("source") == "agent" and not own[i] and i < last_own)
                for i, s in enumerate(steps)]

    def finished(self, steps: list[dict[str, Any]]) -> tuple[bool, str]:
        return Conventions.finished(self, steps)


class OpenHandsConverter(Conventions):
    name = "openhands"

    def rebuilt_reason(self) -> str:
        return ("Harbor's OpenHands converter logs each action's OpenHands event message (a summary such "
                "as 'I edited the file ...'), not the text the model wrote with its tool call, and "
                "re-serializes the arguments of the response's first tool call (a response with several "
                "calls is logged as several steps with those arguments): tool-call actions are stored with "
                "their tool call and without that summary")

    def agent_text(self, step: dict[str, Any], message: str) -> AgentText:
        if not _calls(step):
            return AgentText(message)  # a MessageAction: its message is the model's content
        keep = "" if message.startswith(OPENHANDS_EVENT_MESSAGES) else message
        return AgentText(keep, rebuilt=True)

    def finished(self, steps: list[dict[str, Any]]) -> tuple[bool, str]:
        agent = _agent_steps(steps)
        if agent and "finish" in _call_names(agent[-1]):
            return True, "the agent called finish"
        return False, "no finish call: the run stopped before the agent finished (ATIF records no status)"


def conventions_for(agent: dict[str, Any]) -> Conventions:
    """The reading of an ATIF file written by `agent` (its ``agent`` object): by ``agent.name``."""
    name = str(agent.get("name") or "")
    if name == "terminus-2":
        return Terminus2(agent)
    if name.startswith("terminus-2-"):
        return Terminus2Subagent(agent)
    if name == "openhands":
        return OpenHandsConverter(agent)
    return Conventions(agent)


def run_status(conv: Conventions, steps: list[dict[str, Any]],
               exception: dict[str, Any] | None) -> tuple[str, str]:
    """(status, evidence): from the Harbor trial's exception when one is recorded (a limit:
    ``truncated``; grading errors: no bearing; other errors: ``failed``), else ``completed`` only
    when the log shows the run finished (:meth:`Conventions.finished`), else ``aborted``: a
    timeout or a kill is never ``completed``."""
    done, evidence = conv.finished(steps)
    etype = str((exception or {}).get("exception_type") or "")
    if etype and not etype.startswith(AFTER_AGENT_EXCEPTIONS):
        status = "truncated" if etype in TRUNCATING_EXCEPTIONS else "failed"
        return status, f"the trial's result.json records {etype}: {str(exception.get('exception_message'))[:200]}"
    return ("completed" if done else "aborted"), evidence


def _json_response(analysis: str, plan: str, commands: list[dict[str, Any]], done: bool) -> str:
    cmds = [{"keystrokes": c.get("keystrokes", ""), "duration": c.get("duration", 1.0)} for c in commands]
    return json.dumps({"analysis": analysis, "plan": plan, "commands": cmds, "task_complete": done},
                      indent=2, ensure_ascii=False)


def _xml_response(analysis: str, plan: str, commands: list[dict[str, Any]], done: bool) -> str:
    cmds = "".join(f'<keystrokes duration="{c.get("duration", 1.0)}">{c.get("keystrokes", "")}</keystrokes>\n'
                   for c in commands)
    return (f"<response>\n<analysis>\n{analysis}\n</analysis>\n<plan>\n{plan}\n</plan>\n<commands>\n{cmds}"
            f"</commands>\n<task_complete>{'true' if done else 'false'}</task_complete>\n</response>")

