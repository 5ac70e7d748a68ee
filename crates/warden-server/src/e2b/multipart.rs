//! `multipart/form-data` bodies, as E2B's SDKs upload files (one part per file, the file's
//! path as its `filename`).
//!
//! Invariants: a pure function over the body at hand; a part's data is exactly the bytes
//! between its headers and the next delimiter; anything malformed is an error naming it.

/// One part: its `filename` (if any) and its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub name: Option<String>,
    pub filename: Option<String>,
    pub data: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MultipartError {
    #[error("the Content-Type has no boundary")]
    NoBoundary,
    #[error("the boundary is empty or longer than 200 bytes")]
    BadBoundary,
    #[error("the body does not start with the boundary")]
    NoFirstDelimiter,
    #[error("a part's headers do not end")]
    UnendedHeaders,
    #[error("a part does not end with the boundary")]
    UnendedPart,
}

/// The boundary of a `multipart/form-data; boundary=…` Content-Type.
fn boundary(content_type: &str) -> Result<String, MultipartError> {
    let b = content_type
        .split(';')
        .skip(1)
        .filter_map(|p| p.trim().split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("boundary"))
        .map(|(_, v)| v.trim().trim_matches('"').to_owned())
        .ok_or(MultipartError::NoBoundary)?;
    if b.is_empty() || b.len() > 200 {
        return Err(MultipartError::BadBoundary);
    }
    Ok(b)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A header's parameter (`filename="…"`), unquoted.
fn param(header: &str, name: &str) -> Option<String> {
    header.split(';').skip(1).find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().trim_matches('"').replace("\\\"", "\""))
    })
}

/// The parts of a body.
pub fn parse(content_type: &str, body: &[u8]) -> Result<Vec<Part>, MultipartError> {
    let boundary = boundary(content_type)?;
    let delimiter = format!("--{boundary}");
    let next_delimiter = format!("\r\n--{boundary}");
    let start = find(body, delimiter.as_bytes()).ok_or(MultipartError::NoFirstDelimiter)?;
    let mut rest = &body[start + delimiter.len()..];
    let mut parts = Vec::new();
    loop {
        if rest.starts_with(b"--") {
            return Ok(parts);
        }
        rest = rest
            .strip_prefix(b"\r\n")
            .ok_or(MultipartError::UnendedPart)?;
        let head_end = find(rest, b"\r\n\r\n").ok_or(MultipartError::UnendedHeaders)?;
        let head = String::from_utf8_lossy(&rest[..head_end]);
        let mut part = Part {
            name: None,
            filename: None,
            data: Vec::new(),
        };
        for line in head.split("\r\n") {
            if let Some((k, v)) = line.split_once(':')
                && k.trim().eq_ignore_ascii_case("content-disposition")
            {
                part.name = param(v, "name");
                part.filename = param(v, "filename");
            }
        }
        rest = &rest[head_end + 4..];
        let end = find(rest, next_delimiter.as_bytes()).ok_or(MultipartError::UnendedPart)?;
        part.data = rest[..end].to_vec();
        parts.push(part);
        rest = &rest[end + next_delimiter.len()..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_keep_their_bytes_and_filenames() {
        let body = b"--xyz\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/home/user/a.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n\x00\x01\r\n--x\r\n--xyz\r\nContent-Disposition: form-data; name=\"file\"; filename=\"b.txt\"\r\n\r\nhi\r\n--xyz--\r\n";
        let parts = parse("multipart/form-data; boundary=xyz", body).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].filename.as_deref(), Some("/home/user/a.bin"));
        assert_eq!(parts[0].data, b"\x00\x01\r\n--x");
        assert_eq!(parts[1].filename.as_deref(), Some("b.txt"));
        assert_eq!(parts[1].data, b"hi");
    }

    #[test]
    fn malformed_bodies_are_errors() {
        assert_eq!(
            parse("multipart/form-data", b""),
            Err(MultipartError::NoBoundary)
        );
        assert_eq!(
            parse("multipart/form-data; boundary=", b""),
            Err(MultipartError::BadBoundary)
        );
        let ct = "multipart/form-data; boundary=b";
        assert_eq!(parse(ct, b"junk"), Err(MultipartError::NoFirstDelimiter));
        assert_eq!(
            parse(ct, b"--b\r\nno end"),
            Err(MultipartError::UnendedHeaders)
        );
        assert_eq!(
            parse(ct, b"--b\r\nA: b\r\n\r\ndata without end"),
            Err(MultipartError::UnendedPart)
        );
        assert_eq!(parse(ct, b"--b--\r\n"), Ok(vec![]));
    }
}
