"""`gpustack comment`: one comment per stack on the pull or merge request, found again by its marker and updated on
every push, against a fake GitHub and a fake GitLab API."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

import gpustack.__main__ as cli
from gpustack import pr_comment
from gpustack.diff_report import MARKER, STATUS


class FakeForge(ThreadingHTTPServer):
    """Comments of one PR (GitHub: /repos/o/r/issues/7/comments) or MR (GitLab: /projects/g%2Fp/merge_requests/7/notes)."""

    def __init__(self, kind: str):
        super().__init__(("127.0.0.1", 0), Handler)
        self.kind = kind
        self.comments: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str]] = []
        self.refuse = 0
        self.html = False

    @property
    def collection(self) -> str:
        return "/repos/o/r/issues/7/comments" if self.kind == "github" else "/projects/g%2Fp/merge_requests/7/notes"

    def env(self, tmp_path: Path) -> dict[str, str]:
        url = f"http://127.0.0.1:{self.server_address[1]}"
        if self.kind == "github":
            event = tmp_path / "event.json"
            event.write_text(json.dumps({"pull_request": {"number": 7}}))
            return {"GITHUB_ACTIONS": "true", "GITHUB_API_URL": url, "GITHUB_REPOSITORY": "o/r",
                    "GITHUB_EVENT_PATH": str(event), "GITHUB_TOKEN": "t0ken"}
        return {"GITLAB_CI": "true", "CI_API_V4_URL": url, "CI_PROJECT_ID": "g/p", "CI_MERGE_REQUEST_IID": "7",
                "GPUSTACK_GITLAB_TOKEN": "t0ken"}


class Handler(BaseHTTPRequestHandler):
    server: FakeForge

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self) -> None:
        forge, url = self.server, urlsplit(self.path)
        forge.requests.append((self.command, url.path))
        authorized = (self.headers.get("Authorization") == "Bearer t0ken" if forge.kind == "github"
                      else self.headers.get("PRIVATE-TOKEN") == "t0ken")
        if forge.html:
            data = b"<html><body>Sign in to continue</body></html>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            return self.wfile.write(data)
        if not authorized or forge.refuse:
            return self._answer(forge.refuse or 401, {"message": "Resource not accessible by integration"})
        length = int(self.headers.get("Content-Length") or 0)
        sent = json.loads(self.rfile.read(length)) if length else None
        if url.path == forge.collection and self.command == "GET":
            query = parse_qs(url.query)
            size, page = int(query["per_page"][0]), int(query["page"][0])
            return self._answer(200, forge.comments[(page - 1) * size: page * size])
        if url.path == forge.collection and self.command == "POST":
            comment = {"id": 1000 + len(forge.comments), "body": sent["body"]}
            forge.comments.append(comment)
            return self._answer(201, comment)
        update = "PATCH" if forge.kind == "github" else "PUT"
        prefix = "/repos/o/r/issues/comments/" if forge.kind == "github" else forge.collection + "/"
        if self.command == update and url.path.startswith(prefix):
            comment = next(c for c in forge.comments if str(c["id"]) == url.path[len(prefix):])
            comment["body"] = sent["body"]
            return self._answer(200, comment)
        return self._answer(404, {"message": "Not Found"})

    do_GET = do_POST = do_PATCH = do_PUT = _handle


@pytest.fixture(params=["github", "gitlab"])
def forge(request):
    server = FakeForge(request.param)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def body(folder: Path, stack: str, changes: int, text: str = "plan", verdict: str = "safe") -> Path:
    path = folder / f"plan-{stack}-{changes}-{len(text)}.md"
    path.write_text("\n".join([MARKER.format(stack=stack), f"### {text}", "", STATUS.format(changes=changes, verdict=verdict)]) + "\n")
    return path


def comment(monkeypatch, capsys, env: dict[str, str], *paths: Path) -> tuple[int, str, str]:
    for key in ("GITHUB_ACTIONS", "GITLAB_CI"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    code = cli.main(["comment", *[a for p in paths for a in ("--body", str(p))]])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_plan_is_posted_once_then_updated_on_every_push(forge, tmp_path, monkeypatch, capsys):
    forge.comments.append({"id": 1, "body": "LGTM"})
    code, out, _ = comment(monkeypatch, capsys, forge.env(tmp_path), body(tmp_path, "prod-managed", 3, "first push"),
                           body(tmp_path, "dev", 1))
    assert code == 0 and out.count("created") == 2
    code, out, _ = comment(monkeypatch, capsys, forge.env(tmp_path), body(tmp_path, "prod-managed", 2, "second push!"))
    assert code == 0 and "updated" in out
    assert [c["body"].splitlines()[:2] for c in forge.comments] == [
        ["LGTM"], [MARKER.format(stack="prod-managed"), "### second push!"], [MARKER.format(stack="dev"), "### plan"]]


def test_the_marker_is_found_beyond_the_first_page(forge, tmp_path, monkeypatch, capsys):
    forge.comments += [{"id": i, "body": f"chatter {i}"} for i in range(1, 151)]
    forge.comments.append({"id": 151, "body": MARKER.format(stack="dev") + "\nold plan"})
    code, out, _ = comment(monkeypatch, capsys, forge.env(tmp_path), body(tmp_path, "dev", 4))
    assert code == 0 and "updated" in out and len(forge.comments) == 151
    assert forge.comments[-1]["body"].splitlines()[1] == "### plan"
    assert sum(1 for method, _ in forge.requests if method == "GET") == 2


def test_a_plan_without_changes_updates_a_stale_comment_but_opens_none(forge, tmp_path, monkeypatch, capsys):
    code, out, _ = comment(monkeypatch, capsys, forge.env(tmp_path), body(tmp_path, "dev", 0))
    assert code == 0 and "no changes, no comment" in out and forge.comments == []
    forge.comments.append({"id": 5, "body": MARKER.format(stack="dev") + "\n### a plan that no longer holds"})
    comment(monkeypatch, capsys, forge.env(tmp_path), body(tmp_path, "dev", 0, "nothing to do"))
    assert forge.comments[0]["body"].splitlines()[1] == "### nothing to do"


def test_a_long_plan_is_cut_below_the_hosts_limit_and_keeps_its_marker(forge, tmp_path, monkeypatch, capsys):
    path = body(tmp_path, "prod-managed", 900, "row\n" * 40_000)
    comment(monkeypatch, capsys, forge.env(tmp_path), path)
    (posted,) = forge.comments
    assert len(posted["body"]) <= pr_comment.MAX_BODY and posted["body"].startswith(MARKER.format(stack="prod-managed"))
    assert "cut here" in posted["body"]


def test_a_refusing_host_exits_2_with_one_line_that_never_shows_the_token(forge, tmp_path, monkeypatch, capsys):
    forge.refuse = 403
    code, out, err = comment(monkeypatch, capsys, forge.env(tmp_path), body(tmp_path, "dev", 1))
    assert code == cli.EXIT_CONFIG and out == "" and len(err.strip().splitlines()) == 1
    assert "answered GET" in err and "403" in err and "t0ken" not in err


def test_a_page_that_is_not_the_api_exits_2_with_one_line(forge, tmp_path, monkeypatch, capsys):
    forge.html = True
    code, out, err = comment(monkeypatch, capsys, forge.env(tmp_path), body(tmp_path, "dev", 1))
    assert code == cli.EXIT_CONFIG and out == "" and len(err.strip().splitlines()) == 1
    assert "something other than JSON" in err and "Sign in" in err


@pytest.mark.parametrize("env, expected", [
    ({}, "neither GITHUB_ACTIONS nor GITLAB_CI"),
    ({"GITHUB_ACTIONS": "true", "GITHUB_REPOSITORY": "o/r"}, "needs GITHUB_TOKEN"),
    ({"GITLAB_CI": "true", "CI_API_V4_URL": "http://127.0.0.1:9", "CI_PROJECT_ID": "1"}, "needs GPUSTACK_GITLAB_TOKEN"),
    ({"GITLAB_CI": "true", "CI_API_V4_URL": "http://127.0.0.1:9", "CI_PROJECT_ID": "1", "CI_MERGE_REQUEST_IID": "2",
      "GPUSTACK_GITLAB_TOKEN": "x"}, "GitLab API unreachable"),
])
def test_a_job_outside_a_review_exits_2_with_one_line(env, expected, tmp_path, monkeypatch, capsys):
    for key in ("GITHUB_TOKEN", "GH_TOKEN", "GITHUB_EVENT_PATH", "GPUSTACK_PR_NUMBER", "CI_MERGE_REQUEST_IID"):
        monkeypatch.delenv(key, raising=False)
    code, out, err = comment(monkeypatch, capsys, env, body(tmp_path, "dev", 1))
    assert code == cli.EXIT_CONFIG and out == "" and len(err.strip().splitlines()) == 1 and expected in err


def test_a_file_that_is_not_a_plan_is_refused(tmp_path, monkeypatch, capsys):
    other = tmp_path / "notes.md"
    other.write_text("# my notes\n")
    env = {"GITLAB_CI": "true", "CI_API_V4_URL": "http://127.0.0.1:9", "CI_PROJECT_ID": "1", "CI_MERGE_REQUEST_IID": "2",
           "GPUSTACK_GITLAB_TOKEN": "x"}
    code, _, err = comment(monkeypatch, capsys, env, other)
    assert code == cli.EXIT_CONFIG and "is not a `gpustack diff --format markdown` body" in err
    code, _, err = comment(monkeypatch, capsys, env, tmp_path / "missing.md")
    assert code == cli.EXIT_CONFIG and "cannot read" in err and len(err.strip().splitlines()) == 1
