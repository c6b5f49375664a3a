"""Documents become searchable text with the right tags: uploads and URIs,
HTML, PDF (text layer and scanned), PNG/JPEG (OCR, EXIF), DOCX, PPTX, MP3;
the SSRF refusals through the API; hostile files fail cleanly."""

from __future__ import annotations

import io
import json
import zipfile

from app import tenancy
from tests import docs
from tests.docserver import serving
from tests.test_pipeline import jobs_of, put, run_all

LOCAL = {"fetch_allow_networks": ["127.0.0.1/32"]}


async def upload(client, t, data: bytes, filename: str, content_type: str, **form) -> dict:
    fields = {k: (json.dumps(v) if isinstance(v, dict) else v) for k, v in form.items()}
    r = await client.post(
        "/v1/upload",
        files={"file": (filename, data, content_type)},
        data=fields,
        headers=t.headers,
    )
    assert r.status_code == 200, r.text
    return r.json()


async def found(client, t, query: str) -> list[str]:
    r = await client.post(
        "/v1/search", json={"query": query, "stages": "text", "limit": 5}, headers=t.headers
    )
    assert r.status_code == 200, r.text
    return [n["id"] for n in r.json()["notes"]]


async def note(client, t, note_id: str) -> dict:
    r = await client.get(f"/v1/notes/{note_id}", headers=t.headers)
    assert r.status_code == 200, r.text
    return r.json()


async def test_text_pdf_docx_pptx_mp3_uploads(client, tenant, make_pipeline) -> None:
    pdf = docs.text_pdf(["Quarterly revenue grew in Lisbon"], title="Annual report", author="Ana")
    await upload(
        client, tenant, pdf, "report.pdf", "application/pdf", id="report.pdf", tags={"author": "Me"}
    )
    word = docs.docx_file(
        title="Launch plan",
        author="Bo Lind",
        paragraphs=["The rocket launches in May."],
        table=[["stage", "fuel"], ["first", "kerosene"]],
    )
    await upload(client, tenant, word, "plan.docx", "application/octet-stream", id="plan.docx")
    deck = docs.pptx_file(title="Roadmap", author="Cy", slides=[("Kayaks", "Ship the kayak")])
    await upload(client, tenant, deck, "deck.pptx", "application/octet-stream", id="deck.pptx")
    song = docs.mp3_file(
        {
            "title": "Ocean Song",
            "artist": "The Tides",
            "album": "Blue",
            "genre": "Jazz",
            "year": "2019",
        }
    )
    await upload(client, tenant, song, "song.mp3", "audio/mpeg", id="song.mp3")
    await run_all(make_pipeline(), client, tenant)

    assert await found(client, tenant, "revenue Lisbon") == ["report.pdf"]
    tags = (await note(client, tenant, "report.pdf"))["tags"]
    assert tags["title"] == "Annual report" and tags["author"] == "Me"  # the user's value wins
    assert tags["pages"] == "1" and tags["_content_type"] == "application/pdf"

    assert await found(client, tenant, "kerosene rocket") == ["plan.docx"]
    tags = (await note(client, tenant, "plan.docx"))["tags"]
    assert tags["author"] == "Bo Lind" and tags["title"] == "Launch plan"

    assert await found(client, tenant, "kayak") == ["deck.pptx"]
    assert (await note(client, tenant, "deck.pptx"))["tags"]["slides"] == "1"

    assert await found(client, tenant, "Tides jazz") == ["song.mp3"]
    tags = (await note(client, tenant, "song.mp3"))["tags"]
    assert {k: tags[k] for k in ("artist", "album", "genre", "year", "duration")} == {
        "artist": "The Tides",
        "album": "Blue",
        "genre": "Jazz",
        "year": "2019",
        "duration": "5s",
    }


async def test_images_and_scans_get_ocr_later(client, tenant, make_pipeline, db) -> None:
    png = docs.text_image(["Invoice 4471 from Acme Widgets"])
    first = await upload(client, tenant, png, "invoice.png", "image/png", id="invoice.png")
    assert first["pending"] == ["ocr"] and "text to follow" in first["summary"]
    photo = docs.photo_with_exif()
    await upload(client, tenant, photo, "ferry.jpg", "image/jpeg", id="ferry")
    scan = docs.scanned_pdf(["Lease agreement for Flat 12", "Rent is due monthly"])
    await upload(client, tenant, scan, "lease.pdf", "application/pdf", id="lease.pdf")
    assert await found(client, tenant, "Acme invoice") == []  # not yet
    await run_all(make_pipeline(), client, tenant)
    await run_all(make_pipeline(), client, tenant)  # then embedding and summary

    assert await found(client, tenant, "Acme invoice") == ["invoice.png"]
    tags = (await note(client, tenant, "invoice.png"))["tags"]
    assert tags["dimensions"] == "1000x260" and float(tags["ocr_confidence"]) > 0.8
    assert "_pending_document" not in tags
    assert await found(client, tenant, "ferry timetable") == ["ferry"]
    tags = (await note(client, tenant, "ferry"))["tags"]
    assert tags["camera"] == "Fujifilm X100V" and tags["taken"] == "2024-06-01 09:30:00"
    assert await found(client, tenant, "lease rent") == ["lease.pdf"]
    versions = await client.get("/v1/notes/lease.pdf/versions", headers=tenant.headers)
    assert versions.json()["versions"] == []  # the placeholder left no version
    async with tenancy.tenant_id_transaction(db, tenant.id) as s:
        from sqlalchemy import text

        assert (await s.execute(text("SELECT count(*) FROM blobs"))).scalar_one() == 0


async def test_put_by_uri_fetches_html_and_pdf(client, tenant, make_pipeline) -> None:
    with serving() as web:
        page = web.add("/tides.html", docs.html_page(), "text/html; charset=utf-8")
        pdf = web.add(
            "/r.pdf",
            docs.text_pdf(["Harbour dues rose in March"], title="Dues", author="Port"),
            "application/pdf",
        )
        hop = web.redirect("/latest", "/tides.html")
        made = await put(client, tenant, uri=page, tags={"topic": "sea"})
        assert made["id"] == page and made["pending"] == ["fetch"]
        await put(client, tenant, uri=pdf)
        await put(client, tenant, uri=hop)
        await run_all(make_pipeline(**LOCAL), client, tenant)
    got = await note(client, tenant, page.replace("/", "%2F").replace(":", "%3A"))
    assert got["tags"]["title"] == "Tide tables of Porto" and got["tags"]["topic"] == "sea"
    assert (await found(client, tenant, "spring tide Porto"))[:1] in ([page], [hop])
    assert "NAV-NOISE" not in got["summary"] and "SCRIPT-NOISE" not in got["summary"]
    assert await found(client, tenant, "harbour dues") == [pdf]


async def test_put_by_uri_refuses_private_addresses(client, tenant, make_pipeline) -> None:
    with serving() as web:
        web.redirect("/meta", "http://169.254.169.254/latest/meta-data/")
        uris = [
            "http://127.0.0.1:9/x",
            "http://10.0.0.1/x",
            "http://169.254.169.254/latest/meta-data/",
            web.url + "/meta",
        ]
        for uri in uris:
            await put(client, tenant, uri=uri)
        # default settings: nothing private may be fetched, the local server included
        await run_all(make_pipeline(), client, tenant)
        assert web.routes.hits == []
        fetches = await jobs_of(client, tenant, kind="fetch")
        assert len(fetches) == 4
        for job in fetches:
            assert job["status"] == "dead" and "refusing" in job["last_error"], job
            assert job["attempts"] == 1  # permanent: no retries
        gone = await note(client, tenant, "http%3A%2F%2F10.0.0.1%2Fx")
        assert "fetch failed: refusing" in gone["summary"]
        assert "_pending_document" not in gone["tags"]
    r = await client.post("/v1/notes", json={"uri": "ftp://example.com/x"}, headers=tenant.headers)
    assert r.status_code == 400


async def test_a_redirect_to_metadata_is_refused_even_from_an_allowed_host(
    client, tenant, make_pipeline
) -> None:
    with serving() as web:
        hop = web.redirect("/meta", "http://169.254.169.254/latest/meta-data/")
        await put(client, tenant, uri=hop)
        await run_all(make_pipeline(**LOCAL), client, tenant)
        assert web.routes.hits == ["/meta"]
    (job,) = await jobs_of(client, tenant, kind="fetch")
    assert job["status"] == "dead" and "169.254.169.254" in job["last_error"]


async def test_hostile_and_broken_files_fail_cleanly(client, tenant) -> None:
    r = await client.post(
        "/v1/upload",
        files={"file": ("big.txt", b"x" * (2 * 1024 * 1024 + 1), "text/plain")},
        headers=tenant.headers,
    )
    assert r.status_code == 413 and "limit" in r.json()["error"]
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("word/document.xml", b"0" * (300 * 2**20))
    r = await client.post(
        "/v1/upload",
        files={"file": ("bomb.docx", bomb.getvalue(), "application/octet-stream")},
        headers=tenant.headers,
    )
    assert r.status_code == 422 and "zip bomb" in r.json()["error"]
    r = await client.post(
        "/v1/upload",
        files={"file": ("broken.pdf", b"%PDF-1.4 garbage", "application/pdf")},
        headers=tenant.headers,
    )
    assert r.status_code == 422 and "cannot read" in r.json()["error"]
    from PIL import Image

    huge = io.BytesIO()
    Image.new("1", (12000, 12000)).save(huge, "PNG")  # 144 Mpx, a few KB
    r = await client.post(
        "/v1/upload",
        files={"file": ("huge.png", huge.getvalue(), "image/png")},
        headers=tenant.headers,
    )
    assert r.status_code == 422 and "decompression bomb" in r.json()["error"]
    listed = await client.get("/v1/notes", headers=tenant.headers)
    assert listed.json()["notes"] == []  # nothing half-stored


async def test_optional_media_description_over_the_openai_wire_format(
    client, tenant, make_pipeline
) -> None:
    from tests.vendors import Vendor, VendorServer

    vendor = Vendor(summary="A red lighthouse on a rocky shore at sunset.")
    png = docs.text_image(["Harbour"])
    await upload(client, tenant, png, "photo.png", "image/png", id="photo.png")
    with VendorServer(vendor) as server:
        pipeline = make_pipeline(media_provider="openai", media_base_url=server.url + "/v1")
        await run_all(pipeline, client, tenant)
    sent = vendor.requests[0]["body"]["messages"][0]["content"]
    assert sent[1]["image_url"]["url"].startswith("data:image/png;base64,")
    await run_all(make_pipeline(), client, tenant)
    assert await found(client, tenant, "lighthouse sunset") == ["photo.png"]


async def test_giving_up_on_a_document_is_in_the_change_feed(
    client, tenant, make_pipeline, db
) -> None:
    """A fetch that fails for good rewrites the placeholder's summary; a client
    following the change feed must see that change like any other."""
    from sqlalchemy import text

    async def changes() -> list[tuple[str, str]]:
        async with tenancy.tenant_id_transaction(db, tenant.id) as s:
            rows = await s.execute(
                text("SELECT mutation, entity_id FROM changes WHERE tenant_id = :t ORDER BY id"),
                {"t": tenant.id},
            )
            return [(r[0], r[1]) for r in rows]

    made = await put(client, tenant, uri="http://10.0.0.1/report")
    before = await changes()
    assert await run_all(make_pipeline(), client, tenant) == ["dead"]
    after = await changes()
    assert after[len(before) :] == [("doc_update", made["id"])]
    gone = await note(client, tenant, "http%3A%2F%2F10.0.0.1%2Freport")
    assert "fetch failed" in gone["summary"]
