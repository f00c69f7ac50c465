"""What an action or a plugin is, and how it declares itself to the registry."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

if TYPE_CHECKING:
    from scheduler_ext.framework.session import Session

ArgKind = Literal["int", "float", "bool", "str", "duration", "any"]


@dataclass(frozen=True, slots=True)
class ArgSpec:
    """One documented argument of a plugin or action.

    `key` is the YAML key (`nodeaffinity.weight`); with `prefix=True` it matches every key that starts
    with it (`binpack.resources.` for `binpack.resources.nvidia.com/gpu`). `kind` drives validation:
    int accepts YAML integers, float integers or floats, bool YAML booleans or Go ParseBool strings,
    str strings, duration Go duration strings (`3m`, `100ms`), any anything.
    """

    key: str
    kind: ArgKind
    default: Any
    doc: str
    prefix: bool = False

    def matches(self, key: str) -> bool:
        return key.startswith(self.key) if self.prefix else key == self.key


class Arguments(Mapping[str, Any]):
    """A plugin's or action's `arguments:` mapping with Volcano's typed getters.

    Values were validated against the owner's ArgSpecs when the conf was parsed, so the getters only
    convert (a wrong type returns the default, as Volcano's getters leave the target unchanged).
    """

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        self._data: dict[str, Any] = dict(data or {})

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"Arguments({self._data!r})"

    def get_int(self, key: str, default: int) -> int:
        v = self._data.get(key)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
        if isinstance(v, float) and v.is_integer():
            return int(v)
        return default

    def get_float(self, key: str, default: float) -> float:
        v = self._data.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool):
            return float(v)
        return default

    def get_bool(self, key: str, default: bool) -> bool:
        v = self._data.get(key)
        if isinstance(v, bool):
            return v
        if isinstance(v, str):
            from tidemark.apis import parse_bool

            p = parse_bool(v)
            return p.value if p.warning is None else default
        return default

    def get_str(self, key: str, default: str) -> str:
        v = self._data.get(key)
        return v if isinstance(v, str) else default


class Plugin(ABC):
    """A plugin registers callbacks on the session when it opens; it may summarise when it closes."""

    name: str = ""

    @abstractmethod
    def on_session_open(self, ssn: Session) -> None: ...

    def on_session_close(self, ssn: Session) -> None:  # noqa: B027 - optional hook
        """Most plugins have nothing to do at close."""


class Action(ABC):
    """An action runs once per session, in the order the conf lists actions."""

    name: str = ""

    def initialize(self) -> None:  # noqa: B027 - optional hook
        """Called once when the scheduler starts."""

    @abstractmethod
    def execute(self, ssn: Session) -> None: ...

    def uninitialize(self) -> None:  # noqa: B027 - optional hook
        """Called once when the scheduler stops."""


@dataclass(frozen=True, slots=True)
class PluginSpec:
    """A plugin as the registry knows it: conf name, constructor, documented arguments."""

    name: str
    build: Callable[[Arguments], Plugin]
    arguments: tuple[ArgSpec, ...] = ()
    doc: str = ""


@dataclass(frozen=True, slots=True)
class ActionSpec:
    """An action as the registry knows it: conf name, constructor, documented `configurations` arguments."""

    name: str
    build: Callable[[], Action]
    arguments: tuple[ArgSpec, ...] = ()
    doc: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)


class DuplicateRegistration(Exception):
    """Two specs with one name."""


_Spec = TypeVar("_Spec", PluginSpec, ActionSpec)


def build_registry(kind: str, specs: Iterable[_Spec]) -> dict[str, _Spec]:
    """One explicit dict keyed by conf name, as Volcano's factory.go; a duplicate name raises."""
    registry: dict[str, _Spec] = {}
    for spec in specs:
        if spec.name in registry:
            raise DuplicateRegistration(f"{kind} {spec.name!r} registered twice")
        registry[spec.name] = spec
    return registry
