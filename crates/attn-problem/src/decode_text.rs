//! The text form of a decode batch ([`DecodeSpec`]) and of its page policy ([`PagePolicy`]).

use std::fmt;
use std::str::FromStr;

use crate::decode::invalid;
use crate::mask::parse_window;
use crate::shape::heads_text;
use crate::spec::{once, parse_heads, positive};
use crate::{DType, DecodeSpec, KvLayout, PagePolicy, ProblemError, Varlen};

impl fmt::Display for PagePolicy {
    /// `in-order`, `shuffled`, `interleaved` or `shared-prefix=N`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PagePolicy::InOrder => f.write_str("in-order"),
            PagePolicy::Shuffled => f.write_str("shuffled"),
            PagePolicy::Interleaved => f.write_str("interleaved"),
            PagePolicy::SharedPrefix(n) => write!(f, "shared-prefix={n}"),
        }
    }
}

impl FromStr for PagePolicy {
    type Err = ProblemError;

    /// The words [`PagePolicy`]'s `Display` writes; `shared-prefix=N` with `N ≥ 1`.
    fn from_str(text: &str) -> Result<PagePolicy, ProblemError> {
        let policy = match text {
            "in-order" => PagePolicy::InOrder,
            "shuffled" => PagePolicy::Shuffled,
            "interleaved" => PagePolicy::Interleaved,
            _ => match text.strip_prefix("shared-prefix=") {
                Some(n) => PagePolicy::SharedPrefix(
                    positive(n, "number of shared pages").map_err(invalid)?,
                ),
                None => {
                    return Err(invalid(format!(
                    "unknown page policy {text:?}; expected in-order, shuffled, interleaved or shared-prefix=N"
                )))
                }
            },
        };
        Ok(policy)
    }
}

impl From<PagePolicy> for String {
    fn from(policy: PagePolicy) -> String {
        policy.to_string()
    }
}

impl TryFrom<String> for PagePolicy {
    type Error = ProblemError;

    fn try_from(text: String) -> Result<PagePolicy, ProblemError> {
        text.parse()
    }
}

/// `L` when every length is `L`, else `L1,L2,...`.
fn lengths_text(lengths: &[usize]) -> String {
    match lengths {
        [first, rest @ ..] if rest.iter().all(|n| n == first) => first.to_string(),
        _ => lengths
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(","),
    }
}

impl fmt::Display for DecodeSpec {
    /// `decode B=N q=Q kv=KV H=H D=D`, a ragged side as a list per sequence, then
    /// `page=P` and `pages=POLICY` (not `in-order`) when paged, `window=L,R` and the dtype when
    /// not fp16; [`FromStr`] reads it back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "decode B={} q={} kv={} H={} D={}",
            self.sequences(),
            lengths_text(self.seqlens_q()),
            lengths_text(self.seqlens_kv()),
            heads_text(self.heads(), self.kv_heads()),
            self.head_dim()
        )?;
        if let KvLayout::Paged { page_size, policy } = self.layout() {
            write!(f, " page={page_size}")?;
            if policy != PagePolicy::InOrder {
                write!(f, " pages={policy}")?;
            }
        }
        if let Some(window) = self.window() {
            write!(f, " window={window}")?;
        }
        if self.dtype() != DType::F16 {
            write!(f, " {}", self.dtype())?;
        }
        Ok(())
    }
}

/// A `q=` or `kv=` list: non-negative integers, comma separated.
fn parse_list(word: &str, text: &str) -> Result<Vec<usize>, String> {
    text.split(',')
        .map(|t| {
            t.trim()
                .parse::<usize>()
                .map_err(|_| format!("{word}: {t:?} is not a non-negative integer"))
        })
        .collect()
}

/// `list` for `batch` sequences: as given when it has one length per sequence, repeated when it
/// has one length.
fn per_sequence(name: &str, list: Vec<usize>, batch: usize) -> Result<Vec<usize>, String> {
    match list.len() {
        n if n == batch => Ok(list),
        1 => Ok(vec![list[0]; batch]),
        n => Err(format!(
            "{name}= lists {n} lengths for B={batch} sequences: give one length for all, or one per sequence"
        )),
    }
}

impl FromStr for DecodeSpec {
    type Err = ProblemError;

    /// `decode` then, in any order, `q=Q` and `kv=KV` (one length for all, or `L1,L2,...` per
    /// sequence), `H=H` (`HQ/HKV` for grouped heads), `D=D`, optionally `B=N` (else the lists'
    /// length), `page=P` (0 or absent: contiguous), `pages=POLICY` (paged only; default
    /// `in-order`), `window=L,R`, `fp16` or `bf16`; each word once.
    fn from_str(text: &str) -> Result<DecodeSpec, ProblemError> {
        let fail = |reason: String| ProblemError::Shape {
            text: text.to_owned(),
            reason,
        };
        let grammar =
            "decode q=Q kv=KV H=H D=D [B=N] [page=P] [pages=POLICY] [window=L,R] [fp16|bf16]";
        let mut words = text.split_whitespace();
        if words.next() != Some("decode") {
            return Err(fail(format!("a decode batch is written {grammar}")));
        }
        let mut seen: Vec<&str> = Vec::new();
        let (mut batch, mut q, mut kv, mut heads, mut head_dim) = (None, None, None, None, None);
        let (mut page, mut policy, mut window) = (0, None, None);
        let mut dtype_word = None;
        let mut dtype = DType::F16;
        for word in words {
            if word == "fp16" || word == "bf16" {
                once(&mut dtype_word, word, "dtype").map_err(fail)?;
                dtype = if word == "fp16" {
                    DType::F16
                } else {
                    DType::Bf16
                };
                continue;
            }
            let Some((key, value)) = word.split_once('=') else {
                let hint = if word == "causal" {
                    "decode is always causal (the new tokens end their sequence); drop the word"
                        .to_owned()
                } else {
                    format!("unknown word {word:?}; expected {grammar}")
                };
                return Err(fail(hint));
            };
            if seen.contains(&key) {
                return Err(fail(format!("{key}= is given twice")));
            }
            seen.push(key);
            match key {
                "B" => batch = Some(positive(value, "batch size").map_err(fail)?),
                "q" => q = Some(parse_list(word, value).map_err(fail)?),
                "kv" => kv = Some(parse_list(word, value).map_err(fail)?),
                "H" => heads = Some(parse_heads(value).map_err(fail)?),
                "D" => head_dim = Some(positive(value, "head dim").map_err(fail)?),
                "page" => {
                    page = value
                        .parse::<usize>()
                        .map_err(|_| fail(format!("page={value}: not a non-negative integer")))?
                }
                "pages" => {
                    policy = Some(
                        value
                            .parse::<PagePolicy>()
                            .map_err(|e| fail(e.to_string()))?,
                    )
                }
                "window" => {
                    window = Some(
                        parse_window(value).map_err(|reason| fail(format!("{word}: {reason}")))?,
                    )
                }
                _ => return Err(fail(format!("unknown word {word:?}; expected {grammar}"))),
            }
        }
        let (Some(q), Some(kv), Some(heads), Some(head_dim)) = (q, kv, heads, head_dim) else {
            return Err(fail(format!("q=, kv=, H= and D= are required: {grammar}")));
        };
        let batch = batch.unwrap_or(q.len().max(kv.len()));
        let q = per_sequence("q", q, batch).map_err(fail)?;
        let kv = per_sequence("kv", kv, batch).map_err(fail)?;
        let layout =
            match (page, policy) {
                (0, Some(_)) => return Err(fail(
                    "pages= chooses a block table, but page=0 (or none) is the contiguous layout"
                        .into(),
                )),
                (0, None) => KvLayout::Contiguous,
                (page_size, policy) => KvLayout::Paged {
                    page_size,
                    policy: policy.unwrap_or_default(),
                },
            };
        let (heads, kv_heads) = (heads.0, heads.1.unwrap_or(heads.0));
        let lengths = Varlen {
            seqlens_q: q,
            seqlens_kv: kv,
        };
        let build = || -> Result<DecodeSpec, ProblemError> {
            let spec = DecodeSpec::new(lengths, heads, kv_heads, head_dim, layout)?;
            let spec = match window {
                Some(window) => spec.with_window(window)?,
                None => spec,
            };
            spec.with_dtype(dtype)
        };
        build().map_err(|error| fail(error.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> DecodeSpec {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn refusal(text: &str) -> String {
        let message = text.parse::<DecodeSpec>().unwrap_err().to_string();
        assert!(!message.contains('\n'), "{message}");
        message
    }

    #[test]
    fn text_round_trips() {
        for text in [
            "decode B=64 q=1 kv=8192 H=32/8 D=128 page=16 bf16",
            "decode B=3 q=1,4,16 kv=100,8192,17 H=32/8 D=128 page=16",
            "decode B=2 q=1 kv=4096 H=8 D=64",
            "decode B=4 q=0,1,2,1 kv=0,1,300,17 H=12/4 D=64 page=3 pages=shuffled",
            "decode B=2 q=4 kv=1000,33 H=64/8 D=128 page=256 pages=shared-prefix=2 window=128,0 bf16",
            "decode B=5 q=1 kv=9 H=6/1 D=32 page=1 pages=interleaved window=4,-1",
        ] {
            let spec = parse(text);
            assert_eq!(spec.to_string(), text);
            assert_eq!(parse(&spec.to_string()), spec);
        }
    }

    #[test]
    fn lists_broadcast_and_words_come_in_any_order() {
        let spec = parse("decode kv=100,200,300 q=2 D=64 H=8/2 page=16 B=3");
        assert_eq!(
            (spec.seqlens_q(), spec.seqlens_kv()),
            (&[2, 2, 2][..], &[100, 200, 300][..])
        );
        assert_eq!(parse("decode q=1 kv=5 H=1 D=8").sequences(), 1);
        assert_eq!(
            parse("decode q=1 kv=5 H=4 D=8 page=0").layout(),
            KvLayout::Contiguous
        );
        let spec = parse("decode B=2 q=1 kv=5 H=4 D=8 page=7 pages=in-order");
        assert_eq!(spec.to_string(), "decode B=2 q=1 kv=5 H=4 D=8 page=7");
    }

    #[test]
    fn refusals_name_what_is_wrong() {
        let cases = [
            ("2,32/8,4096,128", "a decode batch is written decode q=Q"),
            ("decode q=1 kv=10 H=8", "q=, kv=, H= and D= are required"),
            (
                "decode q=1,2 kv=10,20,30 H=8 D=64",
                "q= lists 2 lengths for B=3",
            ),
            (
                "decode B=2 q=1,2,3 kv=10 H=8 D=64",
                "q= lists 3 lengths for B=2",
            ),
            (
                "decode q=0 kv=10 H=8 D=64",
                "sequence 0 has kv=10 keys but no new token",
            ),
            ("decode q=20 kv=100 H=8 D=64", "decode takes 1 to 16"),
            ("decode q=8 kv=4 H=8 D=64", "q=8 new tokens but kv=4"),
            (
                "decode q=1 kv=10 H=8/3 D=64",
                "3 key/value heads do not divide 8",
            ),
            (
                "decode q=1 kv=10 H=8 D=64 page=512",
                "page=512: pages hold 1 to 256",
            ),
            (
                "decode q=1 kv=10 H=8 D=64 page=x",
                "page=x: not a non-negative integer",
            ),
            (
                "decode q=1 kv=10 H=8 D=64 pages=shuffled",
                "page=0 (or none) is the contiguous",
            ),
            (
                "decode q=1 kv=10 H=8 D=64 page=16 pages=random",
                "unknown page policy \"random\"",
            ),
            (
                "decode q=1 kv=10 H=8 D=64 page=16 pages=shared-prefix=0",
                "not a positive number of shared pages",
            ),
            (
                "decode q=1 kv=10 H=8 D=64 causal",
                "decode is always causal",
            ),
            (
                "decode q=1 kv=10 H=8 D=64 window=4,4",
                "decode is causal (right = 0)",
            ),
            ("decode q=1 kv=10 H=8 D=64 fp16 bf16", "two dtypes"),
            ("decode q=1 kv=10 q=2 H=8 D=64", "q= is given twice"),
            (
                "decode q=1 kv=1a H=8 D=64",
                "kv=1a: \"1a\" is not a non-negative integer",
            ),
            ("decode q=1 kv=10 H=8 D=64 S=4", "unknown word \"S=4\""),
            ("decode q=0 kv=0 H=8 D=64", "every sequence is empty"),
        ];
        for (text, expected) in cases {
            let message = refusal(text);
            assert!(
                message.contains(expected),
                "{text}: {message:?} lacks {expected:?}"
            );
        }
    }

    #[test]
    fn policies_round_trip_as_text_and_json() {
        for policy in [
            PagePolicy::InOrder,
            PagePolicy::Shuffled,
            PagePolicy::Interleaved,
            PagePolicy::SharedPrefix(3),
        ] {
            assert_eq!(policy.to_string().parse::<PagePolicy>().unwrap(), policy);
            let json = serde_json::to_string(&policy).unwrap();
            assert_eq!(json, format!("\"{policy}\""));
            assert_eq!(serde_json::from_str::<PagePolicy>(&json).unwrap(), policy);
        }
        assert!(serde_json::from_str::<PagePolicy>("\"sideways\"").is_err());
    }
}
