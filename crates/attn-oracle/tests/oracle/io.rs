//! Shapes, dtypes and names parse; host tensors convert, poison and round-trip through bytes and
//! `.npy` files.

use attn_oracle::{
    npy, DType, Distribution, HostData, HostTensor, OracleError, Shape, POISON_BF16_BITS,
    POISON_F16_BITS, POISON_F32_BITS,
};
use half::{bf16, f16};

#[test]
fn shapes_parse_print_and_count() {
    let shape: Shape = " 2, 16 ,1024,64".parse().unwrap();
    assert_eq!(shape, Shape::new(2, 16, 1024, 1024, 64).unwrap());
    let ragged: Shape = "1,2,100,37,16".parse().unwrap();
    assert_eq!(
        (ragged.q_dims(), ragged.kv_dims()),
        ([1, 2, 100, 16], [1, 2, 37, 16])
    );
    assert_eq!((ragged.q_len(), ragged.kv_len()), (3200, 1184));
    for s in [shape, ragged] {
        assert_eq!(s.to_string().parse::<Shape>().unwrap(), s);
    }
    assert_eq!(ragged.flops(true) * 2.0, ragged.flops(false));
    assert_eq!(ragged.flops(false), 4.0 * 2.0 * 100.0 * 37.0 * 16.0);
    for (text, needle) in [
        ("1,2,3", "3 comma-separated fields"),
        ("1,2,x,4", "\"x\" is not a non-negative integer"),
        ("1,0,3,4", "every extent must be >= 1"),
        ("", "is not a non-negative integer"),
    ] {
        let error = text.parse::<Shape>().unwrap_err().to_string();
        assert!(
            error.contains(needle) && error.contains("B,H,S,D"),
            "{text:?}: {error}"
        );
    }
    assert!(Shape::new(usize::MAX, 2, 2, 2, 2).is_err());
}

#[test]
fn dtypes_and_distributions_parse_and_print() {
    for (text, dtype) in [
        ("fp16", DType::F16),
        ("F16", DType::F16),
        ("half", DType::F16),
        ("bf16", DType::Bf16),
        ("f32", DType::F32),
        ("fp32", DType::F32),
    ] {
        assert_eq!(text.parse::<DType>().unwrap(), dtype);
    }
    assert_eq!(DType::ALL.map(|d| d.to_string()), ["fp16", "bf16", "f32"]);
    assert_eq!(DType::ALL.map(DType::size_bytes), [2, 2, 4]);
    assert!("int8"
        .parse::<DType>()
        .unwrap_err()
        .to_string()
        .contains("bf16"));
    for distribution in Distribution::ALL {
        let name = distribution.to_string();
        assert_eq!(name.parse::<Distribution>().unwrap(), distribution);
        assert_eq!(
            serde_json::to_string(&distribution).unwrap(),
            format!("\"{name}\"")
        );
    }
    assert_eq!(
        "LARGE_MAGNITUDE".parse::<Distribution>().unwrap(),
        Distribution::LargeMagnitude
    );
    let error = "spiky".parse::<Distribution>().unwrap_err().to_string();
    assert!(error.contains("constant-rows"), "{error}");
}

#[test]
fn poison_values_are_signalling_nans_no_arithmetic_makes() {
    let poisons = [
        f64::from(f16::from_bits(POISON_F16_BITS)),
        f64::from(bf16::from_bits(POISON_BF16_BITS)),
        f64::from(f32::from_bits(POISON_F32_BITS)),
    ];
    assert!(poisons.iter().all(|p| p.is_nan()));
    assert_eq!(POISON_F16_BITS & 0x0200, 0, "fp16 quiet bit clear");
    assert_eq!(POISON_BF16_BITS & 0x0040, 0, "bf16 quiet bit clear");
    assert_eq!(POISON_F32_BITS & 0x0040_0000, 0, "f32 quiet bit clear");
    // NaNs from arithmetic, even on the poison itself, come out quiet, so never poison.
    let made = [
        f32::NAN,
        std::hint::black_box(0.0f32) / 0.0,
        (-1.0f32).sqrt(),
        f32::INFINITY - f32::INFINITY,
        f32::from_bits(POISON_F32_BITS) + 1.0,
    ];
    for nan in made {
        assert_ne!(nan.to_bits(), POISON_F32_BITS);
        assert_ne!(f16::from_f32(nan).to_bits(), POISON_F16_BITS);
        assert_ne!(bf16::from_f32(nan).to_bits(), POISON_BF16_BITS);
    }
    for dtype in DType::ALL {
        let poisoned = HostTensor::poisoned([1, 2, 3, 4], dtype);
        let back = HostTensor::from_bytes([1, 2, 3, 4], dtype, poisoned.as_bytes()).unwrap();
        assert_eq!(
            back.as_bytes(),
            poisoned.as_bytes(),
            "{dtype}: bits survive a download"
        );
        assert_eq!(poisoned.len(), 24);
    }
}

#[test]
fn host_tensors_round_to_nearest_and_round_trip_bytes() {
    let third = [1.0 / 3.0];
    let rounded =
        DType::ALL.map(|dtype| HostTensor::from_f64([1, 1, 1, 1], dtype, &third).to_f64()[0]);
    assert_eq!(
        rounded,
        [0.333251953125, 0.333984375, f64::from(1.0f32 / 3.0)]
    );
    for dtype in DType::ALL {
        let values: Vec<f64> = (0..24).map(|i| i as f64 * 0.37 - 4.0).collect();
        let tensor = HostTensor::from_f64([2, 1, 3, 4], dtype, &values);
        assert_eq!(tensor.as_bytes().len(), 24 * dtype.size_bytes());
        assert_eq!(
            HostTensor::from_bytes([2, 1, 3, 4], dtype, tensor.as_bytes()).unwrap(),
            tensor
        );
        let error = HostTensor::from_bytes([2, 1, 3, 5], dtype, tensor.as_bytes()).unwrap_err();
        assert!(
            matches!(error, OracleError::ByteLength { found, .. } if found == tensor.as_bytes().len())
        );
    }
    let wide = HostTensor {
        dims: [1, 1, 1, 2],
        data: HostData::F64(vec![1.0, 2.0]),
    };
    assert!(matches!(
        wide.dtype(),
        Err(OracleError::NoDeviceDType { .. })
    ));
    assert_eq!(
        format!("{wide:?}"),
        "HostTensor { dims: [1, 1, 1, 2], type: \"f64\", len: 2 }"
    );
}

#[test]
fn npy_files_round_trip_every_element_type_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let values: Vec<f64> = (0..60).map(|i| (i as f64 - 30.0) / 7.0).collect();
    let mut tensors: Vec<HostTensor> = DType::ALL
        .map(|dtype| HostTensor::from_f64([1, 3, 4, 5], dtype, &values))
        .into();
    tensors.push(HostTensor {
        dims: [1, 3, 4, 5],
        data: HostData::F64(values.clone()),
    });
    tensors.push(HostTensor::poisoned([2, 1, 1, 3], DType::Bf16));
    for (i, tensor) in tensors.iter().enumerate() {
        let path = dir.path().join(format!("t{i}.npy"));
        npy::write(&path, &HostTensor::poisoned([1, 1, 1, 1], DType::F16)).unwrap();
        npy::write(&path, tensor).unwrap(); // overwrites
        let back = npy::read(&path).unwrap();
        assert_eq!(back.as_bytes(), tensor.as_bytes(), "{tensor:?}");
        assert_eq!(back.dims, tensor.dims);
        let bytes = std::fs::read(&path).unwrap();
        let header_len = usize::from(u16::from_le_bytes([bytes[8], bytes[9]]));
        assert_eq!((10 + header_len) % 64, 0, "data is 64-byte aligned");
    }
    let read_as = npy::read_as(dir.path().join("t3.npy"), DType::F16).unwrap();
    assert_eq!(read_as, tensors[3].to_dtype(DType::F16));
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        names.len(),
        tensors.len(),
        "no temporary files left: {names:?}"
    );
}

/// A `.npy` file with `header` (a dict literal) and `data`.
fn npy_bytes(header: &str, data: &[u8]) -> Vec<u8> {
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    bytes
}

#[test]
fn npy_reads_other_layouts_and_rejects_what_it_cannot_represent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.npy");
    let read = |bytes: Vec<u8>| {
        std::fs::write(&path, bytes).unwrap();
        npy::read(&path)
    };
    // Big-endian f4, 2-d, double-quoted keys: read as [1, 1, 2, 1].
    let data = [1.5f32.to_be_bytes(), (-2.0f32).to_be_bytes()].concat();
    let t = read(npy_bytes(
        "{\"descr\": \">f4\", \"fortran_order\": False, \"shape\": (2, 1), }\n",
        &data,
    ))
    .unwrap();
    assert_eq!((t.dims, t.to_f64()), ([1, 1, 2, 1], vec![1.5, -2.0]));
    // int16 is read as bf16 bits (torch's `.view(torch.int16)`); leading 1s beyond 4-d are fine.
    let data = 0x3FC0u16.to_le_bytes();
    let t = read(npy_bytes(
        "{'descr': '<i2', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1), }\n",
        &data,
    ))
    .unwrap();
    assert_eq!((t.dtype().unwrap(), t.to_f64()), (DType::Bf16, vec![1.5]));

    for (bytes, needle) in [
        (b"not numpy".to_vec(), "magic"),
        (
            npy_bytes(
                "{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }",
                &[0; 4],
            ),
            "fortran_order",
        ),
        (
            npy_bytes(
                "{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }",
                &[0; 4],
            ),
            "unsupported dtype",
        ),
        (
            npy_bytes(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
                &[0; 4],
            ),
            "expected 12",
        ),
        (
            npy_bytes(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1, 1, 1, 1), }",
                &[0; 8],
            ),
            "more than 4 dims",
        ),
        (
            npy_bytes("{'descr': '<f4', 'fortran_order': False, }", &[0; 4]),
            "no \"shape\"",
        ),
    ] {
        let error = read(bytes).unwrap_err();
        assert!(matches!(error, OracleError::Npy { .. }), "{error}");
        let text = error.to_string();
        assert!(
            text.contains(needle) && text.contains("x.npy"),
            "{needle}: {text}"
        );
    }
    let missing = npy::read(dir.path().join("missing.npy")).unwrap_err();
    assert!(matches!(missing, OracleError::Io { .. }));
}

#[test]
fn read_inputs_makes_one_problem_or_refuses_on_one_line_naming_the_file() {
    use attn_oracle::npy::{check_output_path, read_inputs, ReadOptions};
    let dir = tempfile::tempdir().unwrap();
    let save = |name: &str, dims: [usize; 4], dtype: DType, value: f64| {
        let path = dir.path().join(name);
        let n = dims.iter().product();
        npy::write(&path, &HostTensor::from_f64(dims, dtype, &vec![value; n])).unwrap();
        path
    };
    let q = save("q.npy", [1, 2, 8, 16], DType::F16, 0.5);
    let k = save("k.npy", [1, 2, 4, 16], DType::F16, 0.25);
    let v = save("v.npy", [1, 2, 4, 16], DType::F16, 1.0);
    let short_v = save("v3.npy", [1, 2, 3, 16], DType::F16, 1.0);
    let f32_k = save("k32.npy", [1, 2, 4, 16], DType::F32, 0.25);
    let options = ReadOptions::default();
    let mut notes = Vec::new();
    let files = [("--q", &*q), ("--k", &*k), ("--v", &*v)];
    let inputs = read_inputs(files, &options, |n| notes.push(n)).unwrap();
    assert_eq!(inputs.shape, Shape::new(1, 2, 8, 4, 16).unwrap());
    assert_eq!((inputs.dtype, notes.len()), (DType::F16, 0));

    let refused = |files: [(&str, &std::path::Path); 3], options: ReadOptions| {
        read_inputs(files, &options, |_| {})
            .unwrap_err()
            .to_string()
    };
    let line = refused([("--q", &q), ("--k", &k), ("--v", &short_v)], options);
    assert!(
        line.contains("--v") && line.contains("v3.npy") && line.contains("same length"),
        "{line}"
    );
    let line = refused([("--q", &q), ("--k", &f32_k), ("--v", &v)], options);
    assert!(
        line.contains("q.npy holds fp16 but --k") && line.contains("holds f32"),
        "{line}"
    );
    let bf16 = ReadOptions {
        bf16: true,
        ..options
    };
    let line = refused([("--q", &q), ("--k", &k), ("--v", &v)], bf16);
    assert!(line.contains("holds fp16 and --bf16"), "{line}");
    assert!(!line.contains('\n'), "{line}");

    assert!(check_output_path("--out", &dir.path().join("o.npy")).is_ok());
    let line = check_output_path("--out", dir.path())
        .unwrap_err()
        .to_string();
    assert!(line.contains("is a folder"), "{line}");
    let line = check_output_path("--out", &dir.path().join("no/o.npy"))
        .unwrap_err()
        .to_string();
    assert!(line.contains("does not exist"), "{line}");
}
