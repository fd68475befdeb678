# SPDX-License-Identifier: Apache-2.0
"""The ROCK routes no plugin flow of the other tests needs, once each, against any
OpenSandbox (the simulator, and the real one in the real-opensandbox CI stage, where
tests/real-opensandbox/routes.py checks that every route was served through a bridge-mode
endpoint): the operational endpoints, the synchronous /start, is_alive, list and batch,
get_token, the admin's /proxy stub, and the routes OpenSandbox does not offer (statistics,
commit, host proxy), which answer ROCK's 4000 with the documented texts.
"""
import os

import harness
from harness import PREFIX, Admin, Redis, Sim, os_api_key, test

os.environ.pop("OPEN_SANDBOX_API_KEY", None)
API_KEY = os_api_key("sim-key-routes")


def refused(admin, method, route, text, body=None, query=None):
    st, js = admin.api(method, route, body, query)
    assert st == 200 and js["status"] == "Failed" and js["result"]["code"] == 4000, (st, js)
    assert text in js["error"], js


@test
def remaining_routes_once_each():
    redis = Redis()
    sim = Sim(api_key=API_KEY)
    cfg = {"opensandbox": {"endpoint": sim.endpoint, "protocol": "http", "api_key": API_KEY}}
    admin = Admin(operator="opensandbox", config=cfg, redis=redis)

    # the operational endpoints
    st, js = admin.request("GET", "/livez")
    assert st == 200 and js == {"status": "alive"}, (st, js)
    st, js = admin.request("GET", "/readyz")
    assert st == 200, (st, js)
    st, body, hdrs = admin.request("GET", "/metrics", raw=True)
    assert st == 200 and b"rock_admin_requests_total" in body, (st, body[:300])
    st, js = admin.request("GET", "/openapi.json")
    assert st == 200 and PREFIX + "/execute" in js["paths"], st
    st, body, hdrs = admin.request("GET", "/docs", raw=True)
    assert st == 200 and hdrs.get("Content-Type", "").startswith("text/html"), (st, hdrs)
    st, _ = admin.request("GET", "/")
    assert st == 200, st

    # the synchronous start, then the status routes
    res = admin.ok("POST", "/start", {"image": "python:3.11", "memory": "2g", "cpus": 1})
    sid = res["sandbox_id"]
    admin.wait_alive(sid, 60)
    assert admin.ok("GET", "/is_alive", query={"sandbox_id": sid})["is_alive"] is True
    lst = admin.ok("GET", "/sandboxes", query={"page_size": 10})
    assert [i["sandbox_id"] for i in lst["items"]] == [sid], lst
    b = admin.ok("POST", "/sandboxes/batch", {"sandbox_ids": [sid, "unknown"]})
    assert [s["sandbox_id"] for s in b["statuses"]] == [sid], b
    # no OSS: the SDKs fall back to /upload
    st, js = admin.api("GET", "/get_token", query={"account": "primary"})
    assert js == {"status": "Success", "message": None, "error": None, "result": None}, js
    # the admin role's /proxy stub echoes the request (it reaches no sandbox)
    echo = admin.ok("POST", "/proxy/%s/some/path" % sid, {"a": 1})
    assert echo == {"sandbox_id": sid, "target_path": "some/path", "request": {"a": 1}}, echo

    # what OpenSandbox does not offer: refused with the documented texts, the sandbox untouched
    refused(admin, "GET", "/get_sandbox_statistics",
            "OpenSandbox backend does not support get_sandbox_statistics",
            query={"sandbox_id": sid})
    refused(admin, "POST", "/commit", "commit not supported on OpenSandboxOperator",
            {"sandbox_id": sid, "image_tag": "img:1"})
    refused(admin, "GET", "/commit/" + sid, "commit not supported on OpenSandboxOperator")
    refused(admin, "POST", "/host/proxy/x", "does not support host proxy")
    run = admin.ok("POST", "/execute", {"sandbox_id": sid, "command": "echo still here",
                                        "timeout": 30})
    assert run["exit_code"] == 0 and run["stdout"] == "still here\n", run
    assert admin.ok("POST", "/delete", {"sandbox_id": sid}) == sid + " deleted"


if __name__ == "__main__":
    harness.run()
