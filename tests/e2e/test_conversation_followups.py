"""Follow-ups against a real daemon on a Zotero library (Zotero's own schema, a PDF text with a
running header and page numbers): "And what about lifestyle?" after a question on the DESMOND
programme is answered from the DESMOND papers, not from the library's most "lifestyle" paper; a
complete question after it is searched as asked."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rawrpc import RawConn
from test_library import ask, cited, wait_ready
from zoterofixture import PAGE_BREAK, FixtureAttachment, FixtureItem, build_zotero_dir

pytestmark = pytest.mark.e2e

HEADER = "BMJ 2008;336:491-5 doi:10.1136/bmj.39474.922025.BE"
DESMOND_PDF = PAGE_BREAK.join(f"{HEADER}\n\n{body}\n\n{n}\n\n" for n, body in enumerate([
    "Objective To evaluate the effectiveness of a structured group education programme on biomedical, psychosocial, "
    "and lifestyle measures in people with newly diagnosed type 2 diabetes.",
    "Results At 12 months the DESMOND programme produced greater improvements in weight loss and smoking cessation. "
    "Participants in the DESMOND programme reported lifestyle changes in physical activity and diet.",
    "Conclusions HbA1c levels did not differ between the two groups at 12 months.",
], start=1))

LIBRARY = [
    FixtureItem("DESMOND1", "Effectiveness of the diabetes education and self management for ongoing and newly diagnosed "
                "(DESMOND) programme for people with newly diagnosed type 2 diabetes: cluster randomised controlled trial",
                creators=[("Melanie", "Davies")], date="2008",
                abstract="The DESMOND programme produced greater improvements in weight loss, smoking cessation and "
                         "illness beliefs at 12 months.",
                attachments=[FixtureAttachment("DESMPDF1", text=DESMOND_PDF)]),
    FixtureItem("DESMOND3", "Effectiveness of the DESMOND programme: three year follow-up of a cluster randomised trial",
                creators=[("Kamlesh", "Khunti")], date="2012",
                abstract="At three years the DESMOND programme sustained benefits on illness beliefs; there was no "
                         "difference in lifestyle or biomedical outcomes."),
    FixtureItem("LIFESTY1", "Lifestyle modification and blood pressure in older adults",
                creators=[("Rosa", "Other")], date="2015",
                abstract="Lifestyle modification lowered blood pressure in older adults. A healthy lifestyle of diet and "
                         "exercise matters, and lifestyle counselling helps."),
    FixtureItem("LIFESTY2", "Lifestyle factors and sleep", creators=[("Sam", "Else")], date="2019",
                abstract="Lifestyle factors such as sleep and lifestyle habits shape lifestyle risk."),
    FixtureItem("METFORM1", "Metformin and HbA1c", creators=[("Quinn", "Met")], date="2010",
                abstract="Metformin lowers HbA1c in type 2 diabetes."),
]


def test_a_follow_up_is_answered_in_the_previous_turns_topic_and_a_new_question_is_not(daemon_factory: Any) -> None:
    d = daemon_factory()
    build_zotero_dir(d.data_dir, LIBRARY)
    d.state_dir.mkdir(parents=True, exist_ok=True)
    (d.state_dir / "zocrates_config.json").write_text(json.dumps({"library": {"local_api": False}}))
    d.start()
    with RawConn(d.socket_path) as c:
        assert wait_ready(c)["state"] == "ready"
        sid = c.result("session/new", {"cwd": "/tmp", "mcpServers": []})["sessionId"]
        first = ask(c, sid, "What were the outcomes of the DESMOND programme?")
        assert set(cited(first)) <= {"DESMOND1", "DESMOND3"} and "DESMOND1" in cited(first), first

        lifestyle = ask(c, sid, "And what about lifestyle?")
        assert lifestyle.startswith("As a follow-up on “outcomes DESMOND programme”, I searched for: lifestyle"), lifestyle
        assert cited(lifestyle) and set(cited(lifestyle)) <= {"DESMOND1", "DESMOND3"}, lifestyle
        assert "lifestyle changes in physical activity and diet" in lifestyle

        found = ask(c, sid, "What did they find about smoking cessation?")
        assert set(cited(found)) == {"DESMOND1"} and "smoking cessation" in found

        fresh = ask(c, sid, "How does lifestyle modification affect blood pressure in older adults?")
        assert cited(fresh) == ["LIFESTY1"] and "follow-up" not in fresh, fresh
        ui = c.result("_zocrates/session/get", {"sessionId": sid})
        assert [m["text"] for m in ui["messages"] if m["role"] == "user"][-1].startswith("How does lifestyle")
