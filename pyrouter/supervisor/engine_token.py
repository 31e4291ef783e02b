"""The deployment's engine token (switchyard_engine_api/auth.py) when the operator set none: a fresh
one in a file only this user can read, in serve's run directory, which every child reads through
SWITCHYARD_ENGINE_TOKEN_FILE. A serve that adopts running children keeps the file they were
started with: a new token would lock its own routers out of the adopted engines."""
from __future__ import annotations

import os
import secrets
from pathlib import Path

from switchyard_engine_api.auth import TOKEN_ENV, TOKEN_FILE_ENV


def operator_token() -> bool:
    return bool(os.environ.get(TOKEN_ENV) or os.environ.get(TOKEN_FILE_ENV))


def deployment_token(path: Path, keep: bool) -> None:
    """`keep`: use the token already at `path` (children that read it still run)."""
    if operator_token():
        return
    if not keep:
        partial = path.with_name(path.name + ".partial")
        partial.unlink(missing_ok=True)
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32))
        os.replace(partial, path)
    os.environ[TOKEN_FILE_ENV] = str(path)
