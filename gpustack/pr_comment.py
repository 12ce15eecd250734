"""`python -m gpustack comment --body plan.md ...`: post each `gpustack diff --format markdown` body on the pull
request (GitHub) or merge request (GitLab) the CI job runs for, updating the comment that carries the same marker
(its first line, `<!-- gpustack-diff:<stack> -->`) instead of adding one per push.

A body whose plan has no changes (its status line says `changes=0`) updates an existing comment, so a stale plan
never stays on the PR, but does not open a new one: an unchanged stack stays quiet.

Where it runs, from the CI's own environment:
- GitHub Actions: GITHUB_API_URL, GITHUB_REPOSITORY, the PR number from the event (GITHUB_EVENT_PATH), and a
  token in GITHUB_TOKEN (the job needs `pull-requests: write`);
- GitLab CI: CI_API_V4_URL, CI_PROJECT_ID, CI_MERGE_REQUEST_IID, and a project access token with `api` scope in
  GPUSTACK_GITLAB_TOKEN (a job token cannot write notes).
Only the standard library: the job needs nothing beyond the project's own environment.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

# GitHub refuses a comment body over 65,536 characters; GitLab takes more, but nobody reads that much in a comment.
MAX_BODY = 65_000
PAGE = 100
TIMEOUT_SECONDS = 30
_STATUS = re.compile(r"<!-- gpustack-diff-status: changes=(\d+) verdict=(\w+) -->")
_MARKER = re.compile(r"<!-- gpustack-diff:[A-Za-z0-9_.-]+ -->")


class CommentError(Exception):
    """The body, the CI environment or the API refused; the message says which, on one line."""


@dataclass(frozen=True)
class Forge:
    """One review host's comment API for one pull or merge request."""

    name: str
    comments_url: str  # list (GET, paginated) and create (POST)
    comment_url: Callable[[Any], str]  # update one (by id)
    update_method: str
    headers: Mapping[str, str]


def forge_from_env(env: Mapping[str, str]) -> Forge:
    if env.get("GITHUB_ACTIONS") == "true":
        token = env.get("GITHUB_TOKEN") or env.get("GH_TOKEN")
        repository, api = env.get("GITHUB_REPOSITORY"), env.get("GITHUB_API_URL", "https://api.github.com")
        number = env.get("GPUSTACK_PR_NUMBER") or _github_pr_number(env.get("GITHUB_EVENT_PATH"))
        if not (token and repository and number):
            raise CommentError("comment: GitHub Actions needs GITHUB_TOKEN, GITHUB_REPOSITORY and a pull_request event "
                               "(or GPUSTACK_PR_NUMBER)")
        base = f"{api.rstrip('/')}/repos/{repository}"
        return Forge("GitHub", f"{base}/issues/{number}/comments", lambda i: f"{base}/issues/comments/{i}", "PATCH",
                     {"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json",
                      "X-GitHub-Api-Version": "2022-11-28"})
    if env.get("GITLAB_CI") == "true":
        token, api = env.get("GPUSTACK_GITLAB_TOKEN"), env.get("CI_API_V4_URL")
        project, iid = env.get("CI_PROJECT_ID"), env.get("CI_MERGE_REQUEST_IID")
        if not (token and api and project and iid):
            raise CommentError("comment: GitLab CI needs GPUSTACK_GITLAB_TOKEN (a project access token, api scope), "
                               "CI_API_V4_URL, CI_PROJECT_ID and a merge request pipeline (CI_MERGE_REQUEST_IID)")
        base = f"{api.rstrip('/')}/projects/{urllib.parse.quote(project, safe='')}/merge_requests/{iid}/notes"
        return Forge("GitLab", base, lambda i: f"{base}/{i}", "PUT", {"PRIVATE-TOKEN": token})
    raise CommentError("comment: runs in GitHub Actions or GitLab CI (neither GITHUB_ACTIONS nor GITLAB_CI is 'true')")


def _github_pr_number(event_path: Optional[str]) -> Optional[str]:
    if not event_path:
        return None
    try:
        event = json.loads(Path(event_path).read_text())
    except (OSError, ValueError):
        return None
    number = (event.get("pull_request") or {}).get("number") if isinstance(event, dict) else None
    return str(number) if isinstance(number, int) else None


def _call(forge: Forge, method: str, url: str, body: Optional[dict[str, Any]] = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={**forge.headers, **({"Content-Type": "application/json"} if data else {})})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
            text = response.read().decode()
    except urllib.error.HTTPError as error:
        detail = " ".join(error.read().decode(errors="replace").split())[:200]
        raise CommentError(f"comment: {forge.name} answered {method} {urllib.parse.urlsplit(url).path} with "
                           f"{error.code}: {detail}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as error:
        raise CommentError(f"comment: {forge.name} API unreachable: {getattr(error, 'reason', error)}") from None
    try:
        return json.loads(text) if text else None
    except ValueError:
        # a proxy's or login page's HTML, say: the API was not the one that answered
        raise CommentError(f"comment: {forge.name} answered {method} {urllib.parse.urlsplit(url).path} with "
                           f"something other than JSON: {' '.join(text.split())[:80]!r}") from None


def _existing(forge: Forge, marker: str) -> Optional[Any]:
    page = 1
    while True:
        listed = _call(forge, "GET", f"{forge.comments_url}?per_page={PAGE}&page={page}")
        for comment in listed or []:
            if str(comment.get("body", "")).startswith(marker):
                return comment["id"]
        if not listed or len(listed) < PAGE:
            return None
        page += 1


def read_body(path: Path) -> tuple[str, str, bool]:
    """(marker, body, whether the plan changes anything) of one `gpustack diff --format markdown` output."""
    try:
        body = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise CommentError(f"comment: cannot read {path}: {getattr(error, 'strerror', None) or error}") from None
    first = body.split("\n", 1)[0]
    if not _MARKER.fullmatch(first):
        raise CommentError(f"comment: {path} is not a `gpustack diff --format markdown` body (its first line is no "
                           "<!-- gpustack-diff:<stack> --> marker)")
    status = _STATUS.search(body)
    changed = status is None or int(status.group(1)) > 0 or status.group(2) != "safe"
    if len(body) > MAX_BODY:
        body = body[: MAX_BODY - 200].rsplit("\n", 1)[0] + "\n\n… cut here: the whole plan is in the job's log and artifacts.\n"
    return first, body, changed


def post(forge: Forge, path: Path) -> str:
    marker, body, changed = read_body(path)
    found = _existing(forge, marker)
    if found is not None:
        _call(forge, forge.update_method, forge.comment_url(found), {"body": body})
        return f"{path}: updated {forge.name} comment {found}"
    if not changed:
        return f"{path}: no changes, no comment"
    created = _call(forge, "POST", forge.comments_url, {"body": body})
    return f"{path}: created {forge.name} comment {(created or {}).get('id', '?')}"


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("comment", help="post or update each diff's markdown on the CI's pull or merge request")
    parser.add_argument("--body", required=True, action="append", type=Path,
                        help="a `gpustack diff --format markdown` output file; repeat for several stacks")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace, env: Optional[Mapping[str, str]] = None) -> int:
    forge = forge_from_env(os.environ if env is None else env)
    for path in args.body:
        print(post(forge, path))
    return 0
