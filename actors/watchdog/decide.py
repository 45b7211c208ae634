"""Incidents: the fold of ``incident/<id>`` streams, and what one look's findings make of them.

:func:`apply` folds ``incident.opened`` / ``incident.resolved`` into the open incidents (the
watchdog folds its own appends, and the journal's incident events at start, through the same
function: an :class:`actors.aggregate.Aggregate` over every ``incident/<id>`` stream).
:func:`decide` takes the open incidents and the findings of a look
(:func:`actors.watchdog.checks.check`) and says which events to append and what to do:

- a finding with no open incident for its (domain, subject) opens one (at most one is open per
  pair), naming in ``auto`` mode the action taken;
- in ``auto`` mode a finding with an action is acted on once per incident (the shell remembers
  which ones it acted on: ``acted``);
- an open incident of a domain that was looked at and has no finding any more is resolved:
  ``acted`` when the watchdog acted on it, else ``cleared``.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from actors.stream import Recorded
from actors.watchdog.checks import Checked, Finding, Mode
from events.catalog import (
    Event,
    IncidentAction,
    IncidentDomain,
    IncidentHow,
    IncidentOpened,
    IncidentResolved,
)


def stream_of(incident_id: str) -> str:
    return f"incident/{incident_id}"


class OpenIncident(msgspec.Struct, frozen=True, kw_only=True):
    incident_id: str
    domain: IncidentDomain
    subject: str
    action: IncidentAction | None
    opened_at_ms: int
    next_seq: int = 1
    """The ``stream_seq`` of the incident's next event (its opening is 0)."""

    @property
    def key(self) -> tuple[str, str]:
        return self.domain, self.subject


class Incidents(msgspec.Struct, frozen=True):
    """The open incidents, by (domain, subject)."""

    open: dict[tuple[str, str], OpenIncident] = {}


def initial(first: Recorded) -> Incidents:
    """The open incidents after ``first`` (every record starts the set, empty or not)."""
    return apply(Incidents(), first)


def apply(state: Incidents, rec: Recorded) -> Incidents:
    """Fold one incident event."""
    event = rec.event
    if isinstance(event, IncidentOpened):
        incident = OpenIncident(
            incident_id=event.incident_id,
            domain=event.domain,
            subject=event.subject,
            action=event.action,
            opened_at_ms=rec.at_ms,
        )
        return Incidents({**state.open, incident.key: incident})
    if isinstance(event, IncidentResolved):
        gone = event.incident_id
        return Incidents({k: v for k, v in state.open.items() if v.incident_id != gone})
    return state


class Append(msgspec.Struct, frozen=True):
    """One event to append to ``stream`` at ``expected_seq``."""

    stream: str
    expected_seq: int
    event: Event


class Act(msgspec.Struct, frozen=True, kw_only=True):
    """Something ``auto`` mode does about an incident."""

    incident_id: str
    action: IncidentAction
    finding: Finding


class WatchDecision(msgspec.Struct, frozen=True):
    appends: tuple[Append, ...]
    acts: tuple[Act, ...]


def decide(
    state: Incidents,
    checked: Checked,
    *,
    mode: Mode,
    acted: frozenset[str],
    new_id: Callable[[], str],
) -> WatchDecision:
    """The appends and acts for one look (see the module docstring)."""
    appends: list[Append] = []
    acts: list[Act] = []
    found = {finding.key: finding for finding in checked.findings}
    for finding in checked.findings:
        action = finding.action if mode == "auto" else None
        incident = state.open.get(finding.key)
        if incident is None:
            incident_id = new_id()
            opened = IncidentOpened(
                incident_id=incident_id,
                domain=finding.domain,
                subject=finding.subject,
                evidence=msgspec.to_builtins(finding.evidence),
                action=action,
            )
            appends.append(Append(stream_of(incident_id), 0, opened))
        else:
            incident_id = incident.incident_id
        if action is not None and incident_id not in acted:
            acts.append(Act(incident_id=incident_id, action=action, finding=finding))
    for incident in state.open.values():
        if incident.domain in checked.checked and incident.key not in found:
            how: IncidentHow = (
                "acted" if incident.action or incident.incident_id in acted else "cleared"
            )
            resolved = IncidentResolved(incident_id=incident.incident_id, how=how)
            appends.append(Append(stream_of(incident.incident_id), incident.next_seq, resolved))
    return WatchDecision(tuple(appends), tuple(acts))
