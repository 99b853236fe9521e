//! The vocabulary's text and JSON forms, and the refusals of problem text.

use attn_problem::{DType, ProblemError, ProblemKind, Shape, ShapeSpec, Varlen, Window};

/// `text` refused as problem text, in one line containing `says`.
fn refused(text: &str, says: &str) {
    let err = text.parse::<ShapeSpec>().unwrap_err();
    assert!(
        matches!(err, ProblemError::Shape { .. }),
        "{text:?}: {err:?}"
    );
    let line = err.to_string();
    assert!(line.contains(says), "{text:?}: {line}");
    assert!(!line.contains('\n'), "{text:?}: one line: {line}");
}

#[test]
fn a_window_that_contradicts_causal_is_refused() {
    refused(
        "2,16,1024,64 causal window=2,2",
        "causal means right = 0, but window=2,2 sees 2 keys past the diagonal; write window=2,0",
    );
    // In any order, and in a varlen batch alike.
    refused("1,8,64,64 window=-1,5 causal", "write window=-1,0");
    refused(
        "varlen=5,7 H=8 D=64 causal window=4,1",
        "causal means right = 0",
    );
    // A right side of 0 or unbounded agrees with causal (causal sets it to 0).
    for text in [
        "2,32/8,16384,128 causal window=4096,0",
        "2,8,1024,64 causal window=128,-1",
        "2,8,1024,64 window=2,2",
    ] {
        let shape: ShapeSpec = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(shape.to_string(), text);
    }
}

#[test]
fn a_second_dtype_or_window_is_refused() {
    refused(
        "2,16,1024,64 bf16 fp16",
        "two dtypes, \"bf16\" and \"fp16\": give one",
    );
    refused("2,16,1024,64 bf16 causal bf16", "two dtypes");
    refused(
        "2,16,1024,64 window=8,0 window=16,0",
        "two windows, \"window=8,0\" and \"window=16,0\": give one",
    );
    refused("varlen=5 H=8 D=64 fp16 fp16", "two dtypes");
    let one: ShapeSpec = "2,16,1024,64 bf16 window=8,0".parse().unwrap();
    assert_eq!(
        (one.dtype, one.window),
        (
            DType::Bf16,
            Some(Window {
                left: Some(8),
                right: Some(0)
            })
        )
    );
}

#[test]
fn bad_words_and_dims_are_one_line() {
    for (text, says) in [
        ("", "empty"),
        ("1,2,3", "3 comma-separated fields"),
        ("1,2,0,4", "every extent must be >= 1"),
        ("a,b,c,d", "\"a\" is not a non-negative integer"),
        ("2,32/5,64,8", "divide"),
        ("1,2,3,4 sliding", "unknown word \"sliding\""),
        ("1,2,3,4 window=4096", "window=4096: expected L,R"),
        ("1,2,3,4 window=-2,0", "window side \"-2\""),
    ] {
        refused(text, says);
    }
}

#[test]
fn the_dims_word_reads_the_same_as_a_shape_and_a_problem() {
    for text in [
        "2,16,1024,64",
        "2,32/8,4096,128",
        "1,2,100,37,16",
        "1,8/1,5,7,64",
    ] {
        let shape: Shape = text.parse().unwrap();
        let spec: ShapeSpec = text.parse().unwrap();
        assert_eq!(spec, ShapeSpec::dense(&shape), "{text}");
        assert_eq!(
            (shape.to_string(), spec.to_string()),
            (text.into(), text.into())
        );
    }
    assert_eq!(
        "1,8/8,16,8".parse::<ShapeSpec>().unwrap().kv_heads,
        None,
        "as many K/V heads as query heads is multi-head attention"
    );
}

#[test]
fn json_forms_are_the_evidence_files() {
    // Evidence's spellings: "fp16"/"bf16", {left, right} with null, flat shape fields.
    assert_eq!(serde_json::to_string(&DType::F16).unwrap(), r#""fp16""#);
    assert_eq!(serde_json::to_string(&DType::Bf16).unwrap(), r#""bf16""#);
    assert_eq!(
        serde_json::from_str::<DType>(r#""f16""#).unwrap(),
        DType::F16
    );
    let window: Window = serde_json::from_str(r#"{"left":4096,"right":null}"#).unwrap();
    assert_eq!((window.left, window.right), (Some(4096), None));
    assert_eq!(
        serde_json::to_string(&window).unwrap(),
        r#"{"left":4096,"right":null}"#
    );
    let old = r#"{"batch":2,"heads":32,"kv_heads":8,"seq_q":16384,"seq_kv":16384,"head_dim":128,"causal":true,"window":{"left":4096,"right":0},"dtype":"bf16"}"#;
    let spec: ShapeSpec = serde_json::from_str(old).unwrap();
    assert_eq!(
        spec.to_string(),
        "2,32/8,16384,128 causal window=4096,0 bf16"
    );
    assert_eq!(spec.kind, ProblemKind::PrefillForward);
    assert_eq!(
        serde_json::to_string(&spec).unwrap(),
        old,
        "written back unchanged"
    );
    // No dtype reads as fp16; f32 is no problem's dtype.
    let no_dtype = r#"{"batch":1,"heads":1,"seq_q":2,"seq_kv":2,"head_dim":8,"causal":false}"#;
    assert_eq!(
        serde_json::from_str::<ShapeSpec>(no_dtype).unwrap().dtype,
        DType::F16
    );
    let f32 = no_dtype.replace('}', r#","dtype":"f32"}"#);
    let err = serde_json::from_str::<ShapeSpec>(&f32).unwrap_err();
    assert!(err.to_string().contains("fp16 or bf16"), "{err}");
    let packed: ShapeSpec = "varlen=100:300,7,0:5 H=8 D=64".parse().unwrap();
    let json = serde_json::to_string(&packed).unwrap();
    assert!(
        json.contains(r#""varlen":{"seqlens_q":[100,7,0],"seqlens_kv":[300,7,5]}"#),
        "{json}"
    );
    assert!(
        !json.contains("kind"),
        "the default kind is left out: {json}"
    );
}

#[test]
fn dtypes_parse_every_spelling_and_inputs_are_fp16_or_bf16() {
    for (text, dtype) in [
        ("fp16", DType::F16),
        ("float16", DType::F16),
        ("HALF", DType::F16),
        ("bfloat16", DType::Bf16),
        ("f32", DType::F32),
    ] {
        assert_eq!(text.parse::<DType>().unwrap(), dtype, "{text}");
        assert_eq!(DType::parse_input(text).is_ok(), dtype.is_input(), "{text}");
    }
    assert_eq!(
        DType::parse_input("f32").unwrap_err().to_string(),
        "unsupported dtype \"f32\" (fp16 or bf16)"
    );
    assert_eq!(DType::INPUTS.map(DType::as_str), ["fp16", "bf16"]);
}

#[test]
fn varlen_lengths_refuse_in_one_line() {
    for (text, says) in [
        ("", "lists no sequence lengths"),
        ("512,-5", "\"-5\" is not a non-negative integer"),
        ("0,0", "every sequence is empty"),
        ("2000000000,2000000000", "too many query tokens"),
    ] {
        let err = text.parse::<Varlen>().unwrap_err().to_string();
        assert!(err.contains(says) && !err.contains('\n'), "{text:?}: {err}");
    }
    assert!(Varlen::new(vec![1, 2], vec![1]).is_err());
    let varlen = Varlen::same(vec![3, 0, 2]).unwrap();
    assert_eq!((varlen.longest(), varlen.non_empty()), ((3, 3), 2));
    for row in 0..varlen.total_q() * 4 {
        let id = varlen.row_id(row, 4).unwrap();
        assert_eq!(varlen.packed_row(&id, 4), Some(row));
    }
}

#[test]
fn a_shape_spec_is_never_a_decode_batch() {
    let err = "decode q=1 kv=100 H=8 D=64"
        .parse::<ShapeSpec>()
        .unwrap_err();
    assert!(
        err.to_string().contains("a decode batch is a DecodeSpec"),
        "{err}"
    );
    let json =
        r#"{"batch":1,"heads":1,"seq_q":2,"seq_kv":2,"head_dim":8,"causal":false,"kind":"decode"}"#;
    let err = serde_json::from_str::<ShapeSpec>(json).unwrap_err();
    assert!(err.to_string().contains("not a prefill problem"), "{err}");
    let decode: attn_problem::DecodeSpec = "decode q=1 kv=100 H=8 D=64".parse().unwrap();
    assert_eq!(decode.kind(), ProblemKind::Decode);
}
