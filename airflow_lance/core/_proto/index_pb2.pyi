from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class VectorMetricType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    L2: _ClassVar[VectorMetricType]
    Cosine: _ClassVar[VectorMetricType]
    Dot: _ClassVar[VectorMetricType]
    Hamming: _ClassVar[VectorMetricType]
L2: VectorMetricType
Cosine: VectorMetricType
Dot: VectorMetricType
Hamming: VectorMetricType

class Tensor(_message.Message):
    __slots__ = ("data_type", "shape", "data")
    class DataType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        BFLOAT16: _ClassVar[Tensor.DataType]
        FLOAT16: _ClassVar[Tensor.DataType]
        FLOAT32: _ClassVar[Tensor.DataType]
        FLOAT64: _ClassVar[Tensor.DataType]
        UINT8: _ClassVar[Tensor.DataType]
        UINT16: _ClassVar[Tensor.DataType]
        UINT32: _ClassVar[Tensor.DataType]
        UINT64: _ClassVar[Tensor.DataType]
    BFLOAT16: Tensor.DataType
    FLOAT16: Tensor.DataType
    FLOAT32: Tensor.DataType
    FLOAT64: Tensor.DataType
    UINT8: Tensor.DataType
    UINT16: Tensor.DataType
    UINT32: Tensor.DataType
    UINT64: Tensor.DataType
    DATA_TYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    data_type: Tensor.DataType
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    def __init__(self, data_type: _Optional[_Union[Tensor.DataType, str]] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ...) -> None: ...

class IVF(_message.Message):
    __slots__ = ("centroids", "offsets", "lengths", "centroids_tensor", "loss")
    CENTROIDS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    LENGTHS_FIELD_NUMBER: _ClassVar[int]
    CENTROIDS_TENSOR_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    centroids: _containers.RepeatedScalarFieldContainer[float]
    offsets: _containers.RepeatedScalarFieldContainer[int]
    lengths: _containers.RepeatedScalarFieldContainer[int]
    centroids_tensor: Tensor
    loss: float
    def __init__(self, centroids: _Optional[_Iterable[float]] = ..., offsets: _Optional[_Iterable[int]] = ..., lengths: _Optional[_Iterable[int]] = ..., centroids_tensor: _Optional[_Union[Tensor, _Mapping]] = ..., loss: _Optional[float] = ...) -> None: ...

class VectorIndexDetails(_message.Message):
    __slots__ = ("metric_type", "pq", "flat", "runtime_hints")
    class ProductQuantization(_message.Message):
        __slots__ = ("num_bits", "num_sub_vectors")
        NUM_BITS_FIELD_NUMBER: _ClassVar[int]
        NUM_SUB_VECTORS_FIELD_NUMBER: _ClassVar[int]
        num_bits: int
        num_sub_vectors: int
        def __init__(self, num_bits: _Optional[int] = ..., num_sub_vectors: _Optional[int] = ...) -> None: ...
    class FlatCompression(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class RuntimeHintsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    METRIC_TYPE_FIELD_NUMBER: _ClassVar[int]
    PQ_FIELD_NUMBER: _ClassVar[int]
    FLAT_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_HINTS_FIELD_NUMBER: _ClassVar[int]
    metric_type: VectorMetricType
    pq: VectorIndexDetails.ProductQuantization
    flat: VectorIndexDetails.FlatCompression
    runtime_hints: _containers.ScalarMap[str, str]
    def __init__(self, metric_type: _Optional[_Union[VectorMetricType, str]] = ..., pq: _Optional[_Union[VectorIndexDetails.ProductQuantization, _Mapping]] = ..., flat: _Optional[_Union[VectorIndexDetails.FlatCompression, _Mapping]] = ..., runtime_hints: _Optional[_Mapping[str, str]] = ...) -> None: ...
