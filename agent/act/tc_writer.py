"""Network QoS executor: HTB on offline pods' host-side veths and IFBs, through pyroute2 only.

For one offline pod with host-side veth V (docs/design.md, "Network QoS"):
- download (traffic into the pod = V's egress): root HTB `7464:` on V, one class `7464:10` with
  rate = ceil = the pod's download ceiling, the default class (no filter needed);
- upload (traffic out of the pod = V's ingress): an `ingress` qdisc on V with a match-all u32 filter
  whose action is a mirred egress redirect to an IFB of the agent's own (`tmq<V's ifindex>`), and
  the same HTB on the IFB with the upload ceiling.

Journal (`netqos-journal.json` in the state dir, beside the cgroup knobs' `journal.json`, written
atomically the same way): one record per veth, written and fsync'd BEFORE the first qdisc or IFB
is made, so a kill at any point leaves a journal that covers what exists. Removal (a pod no longer
shaped, `networkQoS.enabled: false`, `tidemark-agent restore`, uninstall) deletes only what is the
agent's: the root qdisc only while it is still HTB with handle `7464:`, the ingress qdisc only where
the record says the agent made it, the IFB by its journaled name, and nothing on a veth whose
ifindex changed (another interface took the name). A veth that already has a root qdisc or an
ingress qdisc of someone else (e.g. the CNI bandwidth plugin) is left alone and reported.
One broken interface never stops the rest: every veth is its own try.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final

from agent.act.statedir import atomic_write_json, copy_private, make_private_dirs, read_json
from agent.decide.netqos import Shape

log = logging.getLogger(__name__)

JOURNAL: Final = "netqos-journal.json"
FORMAT_VERSION: Final = 1
HANDLE: Final = 0x7464_0000  # "td": the root HTB the agent owns
CLASS: Final = HANDLE | 0x10
TC_H_ROOT: Final = 0xFFFF_FFFF
TC_H_INGRESS: Final = 0xFFFF_FFF1
INGRESS_HANDLE: Final = 0xFFFF_0000
ETH_P_ALL: Final = 0x0003
IFB_PREFIX: Final = "tmq"
#: root qdiscs a veth has when nobody shaped it (the kernel's defaults)
DEFAULT_ROOTS: Final = frozenset({"noqueue", "pfifo_fast", "pfifo", "fq_codel", "mq", "fq"})


class TcError(Exception):
    """One interface could not be shaped or cleaned (the message says why)."""


@dataclass(frozen=True, slots=True)
class TcOutcome:
    veth: str
    action: str  # "shape" | "unchanged" | "remove"
    ok: bool
    download_bps: int = 0
    upload_bps: int = 0
    pod: str = ""
    error: str = ""


@dataclass(slots=True)
class LinkRecord:
    """What the agent made on one veth (see the module doc)."""

    index: int
    ifb: str
    pod: str = ""
    ingress: bool = False
    download_bps: int = 0
    upload_bps: int = 0
    #: the inode of the network namespace the writer made it in (0: unknown, a journal of an older version)
    netns: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "ifb": self.ifb,
            "pod": self.pod,
            "ingress": self.ingress,
            "download_bps": self.download_bps,
            "upload_bps": self.upload_bps,
            "netns": self.netns,
        }

    @staticmethod
    def from_json(raw: Any) -> LinkRecord | None:
        """A record from the journal, checked: JSON integers in range (never a string, float or "²"), strings."""
        if not isinstance(raw, dict):
            return None
        index, ifb, pod, ingress = raw.get("index"), raw.get("ifb"), raw.get("pod", ""), raw.get("ingress", False)
        numbers = [raw.get(k, 0) for k in ("download_bps", "upload_bps", "netns")]
        if not isinstance(index, int) or not _json_int(index, 1, 2**31 - 1):
            return None
        if not all(_json_int(n, 0, 2**64 - 1) for n in numbers):
            return None
        if not isinstance(ifb, str) or len(ifb) > 15 or not isinstance(pod, str) or not isinstance(ingress, bool):
            return None
        return LinkRecord(index, ifb, pod, ingress, *numbers)


def _json_int(raw: object, low: int, high: int) -> bool:
    return isinstance(raw, int) and not isinstance(raw, bool) and low <= raw <= high


@dataclass(slots=True)
class TcJournal:
    path: str
    fsync: bool = True
    links: dict[str, LinkRecord] = field(default_factory=dict)

    def load(self) -> None:
        data, why = read_json(self.path)
        if why:
            aside = f"{self.path}.corrupt-{int(time.time())}"
            log.error("network QoS journal unreadable (%s); moved aside as %s, starting empty", why, aside)
            with contextlib.suppress(OSError):
                os.replace(self.path, aside)
        self.links = {}
        left_out: list[str] = []
        if isinstance(data, dict) and isinstance(data.get("links"), dict):
            for veth, raw in data["links"].items():
                rec = LinkRecord.from_json(raw)
                if rec is not None:
                    self.links[str(veth)] = rec
                else:
                    left_out.append(str(veth)[:40])
        if left_out:
            aside = f"{self.path}.rejected-{int(time.time())}"
            with contextlib.suppress(OSError):
                copy_private(self.path, aside)
            log.error("network QoS journal %s: record(s) %s left out (not a link record: JSON integers in range, "
                      "strings); the rest loaded, the file as loaded kept in %s", self.path,
                      ", ".join(left_out[:5]), aside)  # fmt: skip

    def save(self) -> None:
        make_private_dirs(os.path.dirname(self.path) or ".")
        body = {"version": FORMAT_VERSION, "links": {k: v.to_json() for k, v in sorted(self.links.items())}}
        atomic_write_json(self.path, body, fsync=self.fsync)


def ifb_name(veth_index: int) -> str:
    return f"{IFB_PREFIX}{veth_index}"[:15]


def _rate_bytes(bps: int) -> int:
    return max(1, bps // 8)


class TcWriter:
    """Applies the network plan's shapes; `ipr` makes a pyroute2 IPRoute (a parameter for other namespaces).

    `netns` names the namespace `ipr` acts in (an inode; default: this process's own). A record made in
    another namespace is never dropped: an agent moved off the host network (the DaemonSet without the
    network-qos overlay) cannot see the veths and IFBs it made, and must not forget them as if their pods
    were gone; the removal fails with the reason until an agent in that namespace removes them."""

    def __init__(
        self, journal: TcJournal, ipr: Callable[[], Any] | None = None, netns: Callable[[], int] | None = None
    ) -> None:
        self.journal = journal
        self._ipr = ipr or _default_ipr
        self._netns = netns or own_netns

    @contextmanager
    def _route(self) -> Iterator[Any]:
        ipr = self._ipr()
        try:
            yield ipr
        finally:
            ipr.close()

    # --- the whole plan ---------------------------------------------------------------------------

    def apply(self, shapes: Iterable[Shape]) -> list[TcOutcome]:
        """Shape every wanted veth, remove what is journaled and no longer wanted; one try per veth."""
        wanted = {s.veth: s for s in shapes if s.veth}
        out: list[TcOutcome] = []
        with self._route() as ipr:
            for veth in sorted(set(self.journal.links) - set(wanted)):
                out.append(self._remove_one(ipr, veth))
            for veth, shape in sorted(wanted.items()):
                out.append(self._shape_one(ipr, veth, shape))
        return out

    def restore(self) -> list[TcOutcome]:
        """Remove everything journaled (disable, `restore`, uninstall)."""
        return self.apply(())

    # --- one veth ---------------------------------------------------------------------------------

    def _shape_one(self, ipr: Any, veth: str, shape: Shape) -> TcOutcome:
        try:
            changed = self._shape(ipr, veth, shape)
        except Exception as e:  # one broken interface never stops the rest
            log.warning("network QoS: cannot shape %s (%s): %s", veth, shape.key, e)
            return TcOutcome(veth, "shape", False, shape.download_bps, shape.upload_bps, shape.key, _why(e))
        action = "shape" if changed else "unchanged"
        return TcOutcome(veth, action, True, shape.download_bps, shape.upload_bps, shape.key)

    def _remove_one(self, ipr: Any, veth: str) -> TcOutcome:
        rec = self.journal.links[veth]
        here = self._netns()
        if rec.netns and here and rec.netns != here:
            why = (
                f"made in another network namespace (inode {rec.netns}; this agent acts in {here}: not on the host "
                "network?); kept in the journal"
            )
            return TcOutcome(veth, "remove", False, pod=rec.pod, error=why)
        try:
            self._remove(ipr, veth, rec)
        except Exception as e:
            log.warning("network QoS: cannot remove shaping of %s: %s", veth, e)
            return TcOutcome(veth, "remove", False, pod=rec.pod, error=_why(e))
        return TcOutcome(veth, "remove", True, pod=rec.pod)

    def _shape(self, ipr: Any, veth: str, shape: Shape) -> bool:
        index = _lookup(ipr, veth)
        if index is None:
            raise TcError(f"interface {veth} not found")
        rec = self.journal.links.get(veth)
        here = self._netns()
        if rec is not None and rec.netns and here and rec.netns != here:
            raise TcError(f"{veth} is journaled from another network namespace (inode {rec.netns}); not touched")
        if rec is not None and rec.index != index:  # the name now belongs to another interface
            self._drop_ifb(ipr, rec)
            del self.journal.links[veth]
            self.journal.save()
            rec = None
        root = _root_qdisc(ipr, index)
        ours_root = root is not None and root[0] == "htb" and root[1] == HANDLE
        if root is not None and not ours_root and root[0] not in DEFAULT_ROOTS:
            raise TcError(f"{veth} already has a root qdisc {root[0]} {root[1]:#x} of someone else; not touched")
        ingress = _has_ingress(ipr, index)
        if ingress and (rec is None or not rec.ingress):
            raise TcError(f"{veth} already has an ingress qdisc of someone else; not touched")
        if (
            rec is not None
            and ours_root
            and ingress
            and rec.download_bps == shape.download_bps
            and rec.upload_bps == shape.upload_bps
            and _lookup(ipr, rec.ifb) is not None
            and _has_redirect(ipr, index)
        ):
            return False  # no-op
        if rec is None:
            rec = LinkRecord(index, ifb_name(index), shape.key, ingress=True, netns=self._netns())
            self.journal.links[veth] = rec
            self.journal.save()  # before the first change
        # download: HTB on the veth's egress
        _set_htb(ipr, index, shape.download_bps, exists=ours_root)
        # upload: IFB + HTB, fed by ingress + mirred
        ifb = _lookup(ipr, rec.ifb)
        if ifb is None:
            ipr.link("add", ifname=rec.ifb, kind="ifb")
            ifb = _lookup(ipr, rec.ifb)
            if ifb is None:
                raise TcError(f"IFB {rec.ifb} was not created")
            if ingress:  # the old filter redirects to an IFB that is gone: make it anew
                _ignore_gone(lambda: ipr.tc("del", "ingress", index=index, handle=INGRESS_HANDLE))
                ingress = False
        ipr.link("set", index=ifb, state="up")
        ifb_root = _root_qdisc(ipr, ifb)
        _set_htb(ipr, ifb, shape.upload_bps, exists=ifb_root is not None and ifb_root[1] == HANDLE)
        if ingress and not _has_redirect(ipr, index):  # a previous attempt stopped between the two
            _ignore_gone(lambda: ipr.tc("del", "ingress", index=index, handle=INGRESS_HANDLE))
            ingress = False
        if not ingress:
            ipr.tc("add", "ingress", index=index, handle=INGRESS_HANDLE)
            ipr.tc(
                "add-filter",
                "u32",
                index=index,
                parent=INGRESS_HANDLE,
                protocol=ETH_P_ALL,
                prio=1,
                target=0x10,
                keys=["0x0/0x0+0"],
                action={"kind": "mirred", "direction": "egress", "action": "redirect", "ifindex": ifb},
            )
        rec.pod = shape.key
        rec.download_bps = shape.download_bps
        rec.upload_bps = shape.upload_bps
        self.journal.save()
        return True

    def _remove(self, ipr: Any, veth: str, rec: LinkRecord) -> None:
        index = _lookup(ipr, veth)
        if index is not None and index == rec.index:
            root = _root_qdisc(ipr, index)
            if root is not None and root[0] == "htb" and root[1] == HANDLE:
                _ignore_gone(lambda: ipr.tc("del", "htb", index=index, handle=HANDLE))
            if rec.ingress and _has_ingress(ipr, index):
                _ignore_gone(lambda: ipr.tc("del", "ingress", index=index, handle=INGRESS_HANDLE))
        self._drop_ifb(ipr, rec)
        del self.journal.links[veth]
        self.journal.save()

    def _drop_ifb(self, ipr: Any, rec: LinkRecord) -> None:
        ifb = _lookup(ipr, rec.ifb)
        if ifb is not None:
            _ignore_gone(lambda: ipr.link("del", index=ifb))


# --- pyroute2 helpers ----------------------------------------------------------------------------


def _default_ipr() -> Any:
    from pyroute2 import IPRoute

    return IPRoute()


def own_netns() -> int:
    """The inode of this process's network namespace (0 when /proc cannot tell)."""
    try:
        return os.stat("/proc/self/ns/net").st_ino
    except OSError:
        return 0


def _lookup(ipr: Any, name: str) -> int | None:
    found = ipr.link_lookup(ifname=name)
    return int(found[0]) if found else None


def _root_qdisc(ipr: Any, index: int) -> tuple[str, int] | None:
    for q in ipr.get_qdiscs(index=index):
        if q["index"] == index and q["parent"] == TC_H_ROOT:
            return str(q.get_attr("TCA_KIND")), int(q["handle"])
    return None


def _has_ingress(ipr: Any, index: int) -> bool:
    return any(
        q["index"] == index and (q["parent"] == TC_H_INGRESS or q.get_attr("TCA_KIND") in ("ingress", "clsact"))
        for q in ipr.get_qdiscs(index=index)
    )


def _has_redirect(ipr: Any, index: int) -> bool:
    return any(f.get_attr("TCA_KIND") == "u32" for f in ipr.get_filters(index=index, parent=INGRESS_HANDLE))


def _class_rate(ipr: Any, index: int) -> int | None:
    """Bytes/s of the agent's class on `index`, or None."""
    for c in ipr.get_classes(index=index):
        if c["handle"] == CLASS:
            options = c.get_attr("TCA_OPTIONS")
            parms = options.get_attr("TCA_HTB_PARMS") if options is not None else None
            if not parms:
                return None
            rate = int(parms["rate"])
            if rate == 0xFFFF_FFFF:
                rate = int(options.get_attr("TCA_HTB_RATE64") or rate)
            return rate
    return None


def _set_htb(ipr: Any, index: int, bps: int, *, exists: bool) -> None:
    rate = _rate_bytes(bps)
    if not exists:
        ipr.tc("add", "htb", index=index, handle=HANDLE, default=0x10)
        ipr.tc("add-class", "htb", index=index, handle=CLASS, parent=HANDLE, rate=rate, ceil=rate)
        return
    current = _class_rate(ipr, index)
    if current is None:
        ipr.tc("add-class", "htb", index=index, handle=CLASS, parent=HANDLE, rate=rate, ceil=rate)
    elif current != rate:
        ipr.tc("change-class", "htb", index=index, handle=CLASS, parent=HANDLE, rate=rate, ceil=rate)


def _ignore_gone(op: Callable[[], object]) -> None:
    """Run a delete; an object already gone (ENOENT, ENODEV, EINVAL from the kernel) is fine."""
    try:
        op()
    except Exception as e:
        code = getattr(e, "code", None)
        if code not in (errno.ENOENT, errno.ENODEV, errno.EINVAL):
            raise


def _why(e: BaseException) -> str:
    code = getattr(e, "code", None)
    text = str(e) or type(e).__name__
    return f"{text} (errno {code})" if isinstance(code, int) and str(code) not in text else text
