"""Connect to the real PyTRIO service, failing within seconds when it cannot work.

The SDK retries a failing service for up to 15 minutes by default, which in a notebook looks
like a hang. Here the retry windows are shortened with `pytrio.configure` before the client is
created, the whole construction is bounded by a wall-clock limit, and any failure is turned
into one message that says what to configure. The API key is read by the SDK itself (from
`PYTRIO_API_KEY`, which `.env` may set, or a `pytrio` login profile); it never appears in the
messages raised here.
"""

from __future__ import annotations

import os
import threading

from helpers import config

CONNECT_TIMEOUT_S = 10.0
FIX = (
    "To use the real service: put PYTRIO_API_KEY=<your key> in .env at the repository root "
    "(or run `pytrio login`), make sure this machine can reach the service (PYTRIO_BASE_URL "
    "overrides its address), then retry. To stay offline use the local engine: "
    "connect('local') or COURSE_BACKEND=local."
)


class BackendUnavailable(RuntimeError):
    """The PyTRIO service could not be reached or refused the credentials."""


def _load_dotenv() -> None:
    try:
        from dotenv import load_dotenv
    except ImportError:  # python-dotenv is a course dependency, but stay importable without it
        return
    load_dotenv(config.PROJECT_ROOT / ".env", override=False)


def _redact(text: str) -> str:
    key = os.environ.get("PYTRIO_API_KEY")
    return text.replace(key, "<redacted>") if key and len(key) >= 4 else text


def configure_fast_failure(timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    import pytrio

    # the SDK reads PYTRIO_* variables when it is imported; .env may have set them since
    from_env = {"api_key": os.environ.get("PYTRIO_API_KEY"), "base_url": os.environ.get("PYTRIO_BASE_URL")}
    pytrio.configure(**{k: v for k, v in from_env.items() if v})
    pytrio.configure(
        request_timeout_seconds=max(1, int(timeout_s / 2)),
        retry_max_attempts=2,
        retry_initial_delay_seconds=0.5,
        retry_max_delay_seconds=2.0,
        control_retry_timeout_seconds=timeout_s,
        training_retry_timeout_seconds=120.0,
        sampling_retry_timeout_seconds=120.0,
    )


def connect_remote(timeout_s: float = CONNECT_TIMEOUT_S):
    """A real `pytrio.ServiceClient()`, or BackendUnavailable within about `timeout_s` seconds."""
    import pytrio

    _load_dotenv()
    configure_fast_failure(timeout_s)
    box: dict = {}

    def create() -> None:
        try:
            box["client"] = pytrio.ServiceClient()
        except BaseException as error:  # noqa: BLE001 - reported below
            box["error"] = error

    worker = threading.Thread(target=create, name="pytrio-connect", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if "client" in box:
        return box["client"]
    if worker.is_alive():
        reason = f"no answer from the PyTRIO service within {timeout_s:.0f} s"
    else:
        error = box.get("error")
        reason = _redact(f"{type(error).__name__}: {getattr(error, 'message', None) or error}")
    raise BackendUnavailable(f"Could not connect to PyTRIO ({reason}). {FIX}") from None
