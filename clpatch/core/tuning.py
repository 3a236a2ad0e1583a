"""Per-device tuning cache: which kernel configuration autotuning found fastest.

The cache is a store of JSON entries under string keys; what a key and an entry's
"config" mean belongs to the engine that wrote them (the windowed search:
`clpatch.match.window.config.request_key`, `tuned_config`).

One JSON file per device, under the user cache folder (`platformdirs`), or the file named
by `CLPATCH_TUNING` (so a tuned file can ship with a pipeline). A file is valid for one
device name, driver version and kernel source hash; a file made for another (a driver
update, a new clpatch) is ignored with one warning, and so is a damaged file — tuning only
ever changes speed, so ignoring it is always safe.

File layout::

    {"format": 1, "device": ..., "platform": ..., "driver": ..., "source_hash": ...,
     "entries": {"search:p8:s4:n16:w21:c1:l2:image": {
         "config": {...}, "time_ms": 3.5, "rule_config": {...}, "rule_time_ms": 3.9,
         "rejected": [{"config": {...}, "reason": "..."}], "size": [2048, 2048], "date": "..."}}}
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
import threading
from functools import cache
from pathlib import Path
from typing import Any

from .registry import tuned_check, tuned_templates
from .resources import cl_src_dir

log = logging.getLogger("clpatch")

FORMAT = 1


def source_hash() -> str:
    """Hash of the tuned kernels' templates (those the registered operations name): a tuned
    choice is only trusted for the kernels it timed."""
    return _hash_of(tuned_templates())


@cache
def _hash_of(templates: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    root = cl_src_dir()
    for path in (root / name for name in templates):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def device_identity(device: Any) -> dict[str, str]:
    return {"device": device.name.strip(), "platform": device.platform.name.strip(),
            "driver": str(device.driver_version).strip()}


def default_path(device: Any) -> Path:
    """`CLPATCH_TUNING` if set, else `<user cache>/tuning/<device>-<driver>.json`."""
    override = os.environ.get("CLPATCH_TUNING")
    if override:
        return Path(override)
    import platformdirs

    ident = device_identity(device)
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{ident['device']}-{ident['driver']}").strip("_")
    return Path(platformdirs.user_cache_dir("clpatch")) / "tuning" / f"{stem}.json"


class TuningCache:
    """The tuned entries valid for one device (empty when the file is missing, stale or damaged)."""

    def __init__(self, device: Any, path: Path | None = None) -> None:
        self.device = device
        self.path = Path(path) if path is not None else default_path(device)
        self.entries: dict[str, dict[str, Any]] = {}
        self.problem: str | None = None  # why the file was ignored, if it was
        self._lock = threading.Lock()
        self._load()

    def _expected_header(self) -> dict[str, Any]:
        return {"format": FORMAT, **device_identity(self.device), "source_hash": source_hash()}

    def _load(self) -> None:
        if not self.path.is_file():
            return
        try:
            data = json.loads(self.path.read_text())
            if not isinstance(data, dict) or not isinstance(data.get("entries"), dict):
                raise ValueError("not a clpatch tuning file")
        except (OSError, ValueError) as exc:
            self._ignore(f"unreadable ({exc})")
            return
        expected = self._expected_header()
        stale = [k for k, v in expected.items() if data.get(k) != v]
        if stale:
            self._ignore("made for another " + ", ".join(
                f"{k} ({data.get(k)!r}, here {expected[k]!r})" for k in stale))
            return
        good = {}
        for key, entry in data["entries"].items():
            try:
                if not isinstance(entry, dict) or not isinstance(entry.get("config"), dict):
                    raise ValueError("no configuration")
                check = tuned_check(str(key).split(":", 1)[0])
                if check is not None:
                    check(entry["config"])
                good[key] = entry
            except (TypeError, ValueError) as exc:
                log.warning("clpatch: ignoring tuning entry %s in %s (%s)", key, self.path, exc)
        self.entries = good

    def _ignore(self, why: str) -> None:
        self.problem = f"tuning file {self.path} ignored: {why}"
        log.warning("clpatch: %s; the rule-based choices apply (run `clpatch autotune` again)",
                    self.problem)

    def entry(self, key: str) -> dict[str, Any] | None:
        """The entry recorded under `key`, or None."""
        with self._lock:
            return self.entries.get(key)

    def drop(self, key: str, why: str) -> None:
        """Forget an entry its engine cannot use (logged once)."""
        with self._lock:
            if self.entries.pop(key, None) is not None:
                log.warning("clpatch: ignoring tuning entry %s in %s (%s)", key, self.path, why)

    def record(self, key: str, entry: dict[str, Any]) -> None:
        with self._lock:
            self.entries[key] = entry

    def save(self, path: Path | None = None) -> Path:
        """Write the entries (merged over a valid file already there) atomically."""
        target = Path(path) if path is not None else self.path
        with self._lock:
            entries = dict(self.entries)
            if target != self.path and target.is_file():
                other = TuningCache(self.device, target)
                entries = {**other.entries, **entries}
            data = {**self._expected_header(), "entries": entries}
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                                       suffix=".tmp")
            try:    # written whole, then renamed into place; a failure leaves no temporary
                with os.fdopen(fd, "w") as fh:
                    json.dump(data, fh, indent=1, sort_keys=True)
                os.replace(tmp, target)
            except BaseException:
                os.unlink(tmp)
                raise
        return target

