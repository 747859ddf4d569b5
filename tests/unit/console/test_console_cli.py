"""``tidelog console hash-password`` and the console's settings errors, through the CLI entry point."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from tidelog.cli.main import main
from tidelog.console.auth import parse_users, verify_password


def test_hash_password_reads_stdin_and_prints_a_users_file_line(monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("correct horse\n"))
    assert main(["console", "hash-password", "--user", "alice", "--role", "admin"]) == 0
    line = capsys.readouterr().out.strip()
    user = parse_users(line)["alice"]
    assert user.role == "admin" and verify_password("correct horse", user.password_hash)
    assert "correct horse" not in line


def test_an_empty_password_is_refused(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("\n"))
    assert main(["console", "hash-password"]) == 2
    assert "empty password" in capsys.readouterr().err


def test_a_misspelt_setting_stops_the_console_with_the_key_named(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    props = tmp_path / "console.properties"
    props.write_text("console.listen.prot=8081\n")
    assert main(["console", str(props)]) == 2
    assert "unknown setting 'console.listen.prot'" in capsys.readouterr().err
