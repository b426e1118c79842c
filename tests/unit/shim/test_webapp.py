"""The web app's static files (zocratesd/shim/webapp.py): which paths resolve, types, CSP, 304."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from zocratesd.shim.webapp import CONTENT_TYPES, WEBUI_DIR, WebApp, html_csp, resolve


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A web app dir beside a secret it must never serve."""
    (tmp_path / "secret.json").write_text('{"token": "SECRET"}')
    web = tmp_path / "webui"
    (web / "lib").mkdir(parents=True)
    (web / "index.html").write_text("<!doctype html><title>x</title>")
    (web / "app.js").write_text("export const x = 1;")
    (web / "lib" / "md.mjs").write_text("export {};")
    (web / "style.css").write_text("body{}")
    (web / "notes.md").write_text("not a served type")
    (web / ".env.json").write_text("{}")
    (web / "lib" / "out.json").symlink_to(tmp_path / "secret.json")
    (web / "sub.js").mkdir()  # a directory with a served extension
    return web


def test_resolve_serves_only_regular_files_inside_with_known_extensions(root: Path) -> None:
    assert resolve("", root) == (root / "index.html").resolve()
    assert resolve("app.js", root) == (root / "app.js").resolve()
    assert resolve("lib/md.mjs", root) == (root / "lib" / "md.mjs").resolve()
    for bad in ["../secret.json", "lib/../../secret.json", "./app.js", "lib//md.mjs", "/etc/passwd", "lib/out.json",
                "notes.md", ".env.json", "lib\\..\\..\\secret.json", "app.js\x00.html", "missing.js", "sub.js", "lib/",
                "..", "lib/..", "%2e%2e/secret.json"]:
        assert resolve(bad, root) is None, bad


def test_the_packaged_dir_has_the_page() -> None:
    assert resolve("", WEBUI_DIR) is not None


@pytest.fixture
async def client(root: Path) -> AsyncIterator[httpx.AsyncClient]:
    web = WebApp(["http://trusted.example"], root)

    async def serve(request: Request) -> Response:
        return await web.serve(request, request.path_params["path"])

    app = Starlette(routes=[Route("/ui/{path:path}", serve, methods=["GET"])])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as c:
        yield c


@pytest.mark.anyio
async def test_types_headers_and_revalidation(client: httpx.AsyncClient) -> None:
    page = await client.get("/ui/")
    assert page.status_code == 200 and page.headers["content-type"] == CONTENT_TYPES[".html"]
    assert page.headers["content-security-policy"] == html_csp(["http://trusted.example"])
    assert "frame-ancestors 'self' http://trusted.example" in page.headers["content-security-policy"]
    js = await client.get("/ui/lib/md.mjs")
    assert js.headers["content-type"] == "text/javascript; charset=utf-8" and "content-security-policy" not in js.headers
    assert (await client.get("/ui/style.css")).headers["content-type"] == "text/css; charset=utf-8"
    for r in (page, js):
        assert r.headers["x-content-type-options"] == "nosniff" and r.headers["cache-control"] == "no-cache"
    etag = js.headers["etag"]
    assert (await client.get("/ui/lib/md.mjs", headers={"If-None-Match": etag})).status_code == 304
    assert (await client.get("/ui/lib/md.mjs", headers={"If-None-Match": f'"other", {etag}'})).status_code == 304
    assert (await client.get("/ui/lib/md.mjs", headers={"If-None-Match": '"other"'})).status_code == 200
    missing = await client.get("/ui/lib/out.json")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found" and "SECRET" not in missing.text


@pytest.mark.anyio
async def test_a_changed_file_gets_a_new_etag(client: httpx.AsyncClient, root: Path) -> None:
    before = (await client.get("/ui/app.js")).headers["etag"]
    (root / "app.js").write_text("export const x = 2;")
    os.utime(root / "app.js")
    after = await client.get("/ui/app.js")
    assert after.headers["etag"] != before and after.text == "export const x = 2;"


def test_the_csp_takes_only_well_formed_origins_from_the_config() -> None:
    csp = html_csp(["http://trusted.example:8080", "http://x; script-src *", "null", "http://a b", "moz-extension://abc"])
    assert csp.endswith("frame-ancestors 'self' http://trusted.example:8080 moz-extension://abc")
    assert csp.count("script-src") == 1
