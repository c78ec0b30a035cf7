"""``memfs.s3.direct``'s S3 errors are the ``ClientError`` botocore's own parser makes of the
same answer (the error dict that ``store.translate``, the retry checkers and the region
redirect read), for generated error documents and headers."""

from __future__ import annotations

from typing import Any
from xml.sax.saxutils import escape

import botocore.parsers
import botocore.session
from hypothesis import given
from hypothesis import strategies as st

from memfs.s3.direct import _client_error

_MODEL = botocore.session.get_session().get_service_model("s3")
TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30)
CODES = st.sampled_from(["AccessDenied", "PreconditionFailed", "SlowDown", "PermanentRedirect",
                         "AuthorizationHeaderMalformed", "InternalError", "NoSuchKey"]) | \
    st.from_regex(r"[A-Za-z]{1,20}", fullmatch=True)


def botocore_error(op: str, status: int, body: bytes, headers: dict[str, str]) -> Any:
    parser = botocore.parsers.create_parser("rest-xml")
    return parser.parse({"status_code": status, "headers": headers, "body": body},
                        _MODEL.operation_model(op).output_shape)


@given(op=st.sampled_from(["PutObject", "CopyObject", "DeleteObject"]),
       status=st.sampled_from([301, 400, 403, 404, 409, 412, 429, 500, 503]),
       code=CODES, message=TEXT, region=st.none() | st.sampled_from(["eu-west-1", "us-east-2"]),
       extra=st.dictionaries(st.sampled_from(["Resource", "Endpoint", "Bucket", "Key"]), TEXT,
                             max_size=2),
       request_id=st.none() | st.from_regex(r"[A-Z0-9]{8}", fullmatch=True),
       body_id=st.none() | st.from_regex(r"[A-Z0-9]{8}", fullmatch=True),
       with_body=st.booleans())
def test_an_error_is_what_botocore_parses(op, status, code, message, region, extra,
                                          request_id, body_id, with_body) -> None:
    headers = {"content-type": "application/xml"}
    if request_id:
        headers["x-amz-request-id"] = request_id
    body = b""
    if with_body:
        parts = [f"<Code>{code}</Code>", f"<Message>{escape(message)}</Message>"]
        parts += [f"<{k}>{escape(v)}</{k}>" for k, v in extra.items()]
        if region:
            parts.append(f"<Region>{region}</Region>")
        if body_id:
            parts.append(f"<RequestId>{body_id}</RequestId><HostId>h</HostId>")
        body = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error>' + "".join(parts)
                + "</Error>").encode()
    theirs = botocore_error(op, status, body, headers)
    mine = _client_error(op, status, body, headers).response
    # An empty element is None to botocore's parser, "" here (it is only ever logged).
    assert mine["Error"] == {k: "" if v is None else v for k, v in theirs["Error"].items()}
    assert mine["ResponseMetadata"]["HTTPStatusCode"] == \
        theirs["ResponseMetadata"]["HTTPStatusCode"] == status
