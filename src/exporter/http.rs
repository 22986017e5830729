//! Requests and answers of the exporter's HTTP/1.1 (pure: bytes in, bytes out).
//!
//! A request head is its request line and its header lines. The target is taken in origin form
//! (`/metrics?x`) or in absolute form (`http://host:port/metrics`), which RFC 9112 (3.2.2)
//! says a server must take; its path decides the route. The format of `/metrics` is negotiated
//! from `Accept` as the official Prometheus client libraries do it ([`negotiate`]). Nothing a
//! client sends is echoed, logged or kept.

use super::metrics::Format;

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `/metrics`.
    Metrics,
    /// `/`.
    Index,
    /// Another path.
    NotFound,
    /// A method other than GET and HEAD.
    MethodNotAllowed,
    /// Not an HTTP request line, or a target in neither origin nor absolute form.
    BadRequest,
}

/// A request as the exporter reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// What it asks for.
    pub route: Route,
    /// `HEAD`: the answer's head only.
    pub head_only: bool,
    /// The format its `Accept` asks for.
    pub format: Format,
}

/// The path of a request target (pure), without its query: an origin-form target's own, or an
/// absolute-form (`http://` or `https://`, any case) target's, `/` when it has none. `None`
/// for any other form, or an absolute form without a host.
pub fn target_path(target: &str) -> Option<&str> {
    let path = if target.starts_with('/') {
        target
    } else {
        let (scheme, rest) = target.split_once("://")?;
        if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
            return None;
        }
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        if end == 0 {
            return None;
        }
        match &rest[end..] {
            p if p.starts_with('/') => p,
            _ => "/",
        }
    };
    Some(path.split(['?', '#']).next().unwrap_or(path))
}

/// The route of a request head's request line (pure), and whether it asks for the head only.
pub fn route(line: &str) -> (Route, bool) {
    let parts: Vec<&str> = line.split(' ').collect();
    let [method, target, version] = parts[..] else {
        return (Route::BadRequest, false);
    };
    if !version.starts_with("HTTP/1.") {
        return (Route::BadRequest, false);
    }
    let Some(path) = target_path(target) else {
        return (Route::BadRequest, false);
    };
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        return (Route::MethodNotAllowed, false);
    }
    let r = match path {
        "/metrics" => Route::Metrics,
        "/" => Route::Index,
        _ => Route::NotFound,
    };
    (r, head_only)
}

/// The lines of a head, without their line ends.
fn lines(head: &[u8]) -> impl Iterator<Item = &[u8]> {
    head.split(|b| *b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
}

/// Every value of header `name` (any case) in `head`, joined by commas as RFC 9110 (5.3)
/// joins repeated fields; `None` when there is none. A value that is not UTF-8 is left out.
pub fn header(head: &[u8], name: &str) -> Option<String> {
    let values: Vec<&str> = lines(head)
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| {
            let colon = l.iter().position(|b| *b == b':')?;
            let (n, v) = l.split_at(colon);
            n.eq_ignore_ascii_case(name.as_bytes())
                .then(|| std::str::from_utf8(&v[1..]).ok())
                .flatten()
        })
        .map(str::trim)
        .collect();
    (!values.is_empty()).then(|| values.join(","))
}

/// The request in a whole head (pure).
pub fn parse_request(head: &[u8]) -> Request {
    let line = lines(head).next().unwrap_or_default();
    let (route, head_only) = match std::str::from_utf8(line) {
        Ok(line) => route(line),
        Err(_) => (Route::BadRequest, false),
    };
    Request {
        route,
        head_only,
        format: negotiate(header(head, "accept").as_deref()),
    }
}

/// One media range of an `Accept` value: type, subtype, `version` and `q`.
struct Range<'a> {
    kind: String,
    version: Option<&'a str>,
    q: f64,
}

fn parse_range(s: &str) -> Option<Range<'_>> {
    let mut parts = s.split(';').map(str::trim);
    let kind = parts
        .next()
        .filter(|k| k.contains('/'))?
        .to_ascii_lowercase();
    let (mut version, mut q) = (None, 1.0);
    for p in parts {
        let Some((k, v)) = p.split_once('=') else {
            continue;
        };
        let v = v.trim().trim_matches('"');
        match k.trim().to_ascii_lowercase().as_str() {
            "version" => version = Some(v),
            "q" => q = v.parse().ok().filter(|q: &f64| (0.0..=1.0).contains(q))?,
            _ => {}
        }
    }
    Some(Range { kind, version, q })
}

/// The format an `Accept` value asks for (pure), as the official Prometheus client libraries
/// choose (client_golang's `expfmt.NegotiateIncludingOpenMetrics`): its media ranges by `q`,
/// highest first (a wildcard after a type of the same `q`), and the first that names a format
/// this exporter writes: `application/openmetrics-text` of version 1.0.0, 0.0.1 or none
/// (served as 1.0.0), or `text/plain` of version 0.0.4 or none. A range of `q=0` is refused,
/// as RFC 9110 says. Nothing, or nothing known: the text format.
pub fn negotiate(accept: Option<&str>) -> Format {
    let mut ranges: Vec<Range<'_>> = accept
        .unwrap_or_default()
        .split(',')
        .filter_map(parse_range)
        .filter(|r| r.q > 0.0)
        .collect();
    // Stable: ranges of one q keep the client's order.
    ranges.sort_by(|a, b| {
        b.q.total_cmp(&a.q)
            .then_with(|| a.kind.contains('*').cmp(&b.kind.contains('*')))
    });
    for r in &ranges {
        match (r.kind.as_str(), r.version) {
            ("application/openmetrics-text", None | Some("1.0.0" | "0.0.1")) => {
                return Format::OpenMetrics;
            }
            ("text/plain", None | Some("0.0.4")) => return Format::Text,
            _ => {}
        }
    }
    Format::Text
}

/// An answer's head: status line, `Content-Type`, `Content-Length` (`length`), `extra` header
/// lines (each ending in CRLF), `Connection: close`, and the empty line.
pub fn head(status: &str, kind: &str, extra: &str, length: usize) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {length}\r\n{extra}\
         Connection: close\r\n\r\n"
    )
    .into_bytes()
}

/// A whole answer: its [`head`], and the body unless `head_only`.
pub fn response(status: &str, kind: &str, extra: &str, body: &str, head_only: bool) -> Vec<u8> {
    let mut out = head(status, kind, extra, body.len());
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_routed_by_method_and_path() {
        let r = |h: &str| {
            let q = parse_request(h.as_bytes());
            (q.route, q.head_only)
        };
        assert_eq!(
            r("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            (Route::Metrics, false)
        );
        assert_eq!(r("GET /metrics?x=1 HTTP/1.0\n\n"), (Route::Metrics, false));
        assert_eq!(r("HEAD /metrics HTTP/1.1\r\n\r\n"), (Route::Metrics, true));
        assert_eq!(r("GET / HTTP/1.1\r\n\r\n"), (Route::Index, false));
        assert_eq!(r("GET /metricsx HTTP/1.1\r\n\r\n").0, Route::NotFound);
        assert_eq!(r("GET /../etc/passwd HTTP/1.1\r\n\r\n").0, Route::NotFound);
        assert_eq!(
            r("POST /metrics HTTP/1.1\r\n\r\n").0,
            Route::MethodNotAllowed
        );
        for bad in [
            "",
            "GET\r\n\r\n",
            "GET /metrics\r\n\r\n",
            "GET  /metrics HTTP/1.1\r\n\r\n",
            "GET metrics HTTP/1.1\r\n\r\n",
            "GET /metrics SPDY/3\r\n\r\n",
        ] {
            assert_eq!(r(bad).0, Route::BadRequest, "{bad:?}");
        }
        assert_eq!(
            parse_request(b"GET /\xff HTTP/1.1\r\n\r\n").route,
            Route::BadRequest
        );
    }

    #[test]
    fn absolute_form_targets_are_taken_as_rfc_9112_says() {
        let r = |h: &str| route(h).0;
        assert_eq!(
            r("GET http://127.0.0.1:9817/metrics HTTP/1.1"),
            Route::Metrics
        );
        assert_eq!(r("GET HTTPS://node1/metrics?a=b HTTP/1.1"), Route::Metrics);
        assert_eq!(r("GET http://u@node1:1/metrics#f HTTP/1.1"), Route::Metrics);
        assert_eq!(r("GET http://node1 HTTP/1.1"), Route::Index);
        assert_eq!(r("GET http://node1?x HTTP/1.1"), Route::Index);
        assert_eq!(r("GET http://node1/ HTTP/1.1"), Route::Index);
        assert_eq!(r("GET http://node1/other HTTP/1.1"), Route::NotFound);
        assert_eq!(
            r("PUT http://node1/metrics HTTP/1.1"),
            Route::MethodNotAllowed
        );
        for bad in [
            "GET http:///metrics HTTP/1.1",
            "GET http:/metrics HTTP/1.1",
            "GET ftp://node1/metrics HTTP/1.1",
            "GET node1:9817 HTTP/1.1",
            "OPTIONS * HTTP/1.1",
        ] {
            assert_eq!(r(bad), Route::BadRequest, "{bad}");
        }
        assert_eq!(target_path("/a?b#c"), Some("/a"));
    }

    #[test]
    fn headers_are_found_by_name_in_any_case_and_joined() {
        let h = b"GET / HTTP/1.1\r\nHost: x\r\naccept: text/plain\r\nACCEPT:  a/b ;q=1 \r\n\r\nAccept: body\r\n";
        assert_eq!(header(h, "Accept").as_deref(), Some("text/plain,a/b ;q=1"));
        assert_eq!(header(h, "host").as_deref(), Some("x"));
        assert_eq!(header(h, "x-none"), None);
        assert_eq!(header(b"GET / HTTP/1.1\nAccept:\xff\n\n", "accept"), None);
    }

    #[test]
    fn the_format_is_negotiated_as_the_client_libraries_do() {
        let om = Some(Format::OpenMetrics);
        let text = Some(Format::Text);
        for (accept, want) in [
            // Prometheus 2.x's own.
            (
                "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
                om,
            ),
            // Prometheus 3.x's own.
            (
                "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1",
                om,
            ),
            ("application/openmetrics-text", om),
            ("Application/OpenMetrics-Text; Version=\"1.0.0\"", om),
            ("text/plain;q=0.5, application/openmetrics-text", om),
            ("*/*, application/openmetrics-text", om),
            ("application/openmetrics-text;q=0.2,text/plain", text),
            ("application/openmetrics-text;version=2.0.0", text),
            ("application/openmetrics-text;q=0", text),
            ("application/openmetrics-text;q=x", text),
            (
                "text/plain;version=1.0.0,application/openmetrics-text;q=0.9",
                om,
            ),
            ("text/html", text),
            ("*/*", text),
            ("", text),
            (",,;;", text),
        ] {
            assert_eq!(Some(negotiate(Some(accept))), want, "{accept}");
        }
        assert_eq!(negotiate(None), Format::Text);
        let q =
            parse_request(b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text\r\n\r\n");
        assert_eq!(q.format, Format::OpenMetrics);
    }
}
