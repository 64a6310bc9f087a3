//! The server's answers as HTTP responses: a JSON body, or a `Status` document for an error
//! (shared by reads in `http` and writes in `writes`).

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

pub(super) fn json_response(code: StatusCode, body: &Value) -> Response {
    (code, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

/// Why a request was refused, carried on the response for the request log's refusals.
#[derive(Clone)]
pub(super) struct Refused(pub String);

/// A `Status` document, as the real server answers errors.
pub(super) fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16(),
    });
    let mut response = json_response(code, &body);
    response.extensions_mut().insert(Refused(format!("{reason}: {message}")));
    response
}
