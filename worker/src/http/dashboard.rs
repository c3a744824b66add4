//! The live view's static files (dashboard/), embedded in the binary so that
//! provd is one self-contained file. Served with their content type and an
//! ETag; browsers revalidate (no-cache), since files change with the binary.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use super::ApiError;

#[derive(rust_embed::Embed)]
#[folder = "../dashboard/"]
#[exclude = "test/*"]
struct Assets;

pub async fn asset(method: axum::http::Method, uri: Uri, headers: HeaderMap) -> Response {
    if method != axum::http::Method::GET && method != axum::http::Method::HEAD {
        let mut res = super::api::method_not_allowed().await.into_response();
        res.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return res;
    }
    let path = match uri.path().trim_start_matches('/') {
        "" => "index.html",
        p => p,
    };
    let Some(file) = Assets::get(path) else {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no such route or file: /{path}; see docs/API.md"),
        )
        .into_response();
    };
    let etag = format!("\"{}\"", hex::encode(&file.metadata.sha256_hash()[..12]));
    let cache = [(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"))];
    if headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()) == Some(etag.as_str()) {
        return (StatusCode::NOT_MODIFIED, cache, [(header::ETAG, etag)]).into_response();
    }
    let mime = file.metadata.mimetype().to_string();
    (cache, [(header::CONTENT_TYPE, mime), (header::ETAG, etag)], file.data.into_owned()).into_response()
}

/// The operations guide of this very build (docs/operations.md), which the
/// alert rules' `runbook_url`s point at by default: whoever gets paged
/// reads the runbook that matches the worker that paged them.
pub async fn runbook() -> Response {
    let text = include_str!("../../../docs/operations.md");
    ([(header::CONTENT_TYPE, "text/markdown; charset=utf-8")], text).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_the_page_loads_is_embedded() {
        let index = String::from_utf8(Assets::get("index.html").unwrap().data.into_owned()).unwrap();
        // Every local src="…" / href="…" of the page (not data: URLs).
        let loaded: Vec<&str> = ["src=\"", "href=\""]
            .iter()
            .flat_map(|attr| index.split(attr).skip(1).filter_map(|rest| rest.split('"').next()))
            .filter(|f| !f.contains(':'))
            .collect();
        for f in ["style.css", "charts.js", "sse.js", "app.js"] {
            assert!(loaded.contains(&f), "index.html loads {f}: {loaded:?}");
        }
        for f in &loaded {
            assert!(Assets::get(f).is_some(), "{f} embedded");
        }
        assert!(Assets::get("test/charts.test.js").is_none(), "tests are not shipped");
        assert_eq!(Assets::get("app.js").unwrap().metadata.mimetype(), "text/javascript");
    }
}
