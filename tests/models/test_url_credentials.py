"""A password in `base_url` is masked in every form it is sent or echoed in (issue 43): raw, decoded,
`user:password`, and the HTTP Basic token `base64(user:password)`, also where no credential was configured."""

from __future__ import annotations

import base64

from tether.models._sdk_errors import redact_secrets, url_credentials
from tether.models.openai_responses import OpenAIModel


def test_a_base_url_password_is_masked_in_its_basic_form_in_an_adapter_error() -> None:
    model = OpenAIModel(api_key="sk-test-0123456789", base_url="https://bob:p%40ss-word-12@gw.example/v1")
    basic = base64.b64encode(b"bob:p@ss-word-12").decode()
    echoed = f"401 from gateway: sent Authorization: {basic!r} and basic={basic} for p@ss-word-12"
    masked = redact_secrets(echoed, model.credentials())
    assert basic not in masked and "p@ss-word-12" not in masked and "ss-word" not in masked, masked
    assert {"p%40ss-word-12", "p@ss-word-12", "bob:p@ss-word-12", basic} <= set(url_credentials(
        "https://bob:p%40ss-word-12@gw.example/v1"))


def test_any_basic_credential_header_is_masked_without_configuration() -> None:
    token = base64.b64encode(b"alice:another-secret").decode()
    assert redact_secrets(f"echo: Authorization: Basic {token}") == "echo: Authorization: Basic [redacted]"
    assert url_credentials("https://gw.example/v1") == []
