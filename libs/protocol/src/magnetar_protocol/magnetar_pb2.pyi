from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UNKNOWN_ERROR: _ClassVar[ErrorCode]
    BAD_REQUEST: _ClassVar[ErrorCode]
    SERVICE_NOT_READY: _ClassVar[ErrorCode]
    PERSISTENCE_ERROR: _ClassVar[ErrorCode]
    AUTHENTICATION_ERROR: _ClassVar[ErrorCode]
    AUTHORIZATION_ERROR: _ClassVar[ErrorCode]
    TOPIC_NOT_FOUND: _ClassVar[ErrorCode]
    INVALID_TOPIC_NAME: _ClassVar[ErrorCode]
    MESSAGE_TOO_BIG: _ClassVar[ErrorCode]
    PRODUCER_BUSY: _ClassVar[ErrorCode]
    PRODUCER_FENCED: _ClassVar[ErrorCode]
    CONSUMER_BUSY: _ClassVar[ErrorCode]
    NOT_OWNER: _ClassVar[ErrorCode]
    SESSION_NOT_FOUND: _ClassVar[ErrorCode]
    PRODUCER_NOT_FOUND: _ClassVar[ErrorCode]
    CONSUMER_NOT_FOUND: _ClassVar[ErrorCode]
    SUBSCRIPTION_NOT_FOUND: _ClassVar[ErrorCode]
    NOT_ALLOWED: _ClassVar[ErrorCode]
    TRANSACTION_COORDINATOR_NOT_FOUND: _ClassVar[ErrorCode]
    TRANSACTION_NOT_FOUND: _ClassVar[ErrorCode]
    INVALID_TXN_STATUS: _ClassVar[ErrorCode]
    TRANSACTION_CONFLICT: _ClassVar[ErrorCode]
    EXPIRED_TRANSACTION: _ClassVar[ErrorCode]
    TOO_MANY_REQUESTS: _ClassVar[ErrorCode]
    TENANT_NOT_FOUND: _ClassVar[ErrorCode]
    NAMESPACE_NOT_FOUND: _ClassVar[ErrorCode]
    CONFLICT: _ClassVar[ErrorCode]
    TRANSACTION_KEY_NOT_FOUND: _ClassVar[ErrorCode]
    PRODUCER_BLOCKED_QUOTA_EXCEEDED: _ClassVar[ErrorCode]
    TOPIC_TERMINATED: _ClassVar[ErrorCode]
    INCOMPATIBLE_SCHEMA: _ClassVar[ErrorCode]

class ProducerAccessMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACCESS_SHARED: _ClassVar[ProducerAccessMode]
    ACCESS_EXCLUSIVE: _ClassVar[ProducerAccessMode]
    ACCESS_WAIT_FOR_EXCLUSIVE: _ClassVar[ProducerAccessMode]
    ACCESS_EXCLUSIVE_WITH_FENCING: _ClassVar[ProducerAccessMode]

class SubscriptionType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SUB_EXCLUSIVE: _ClassVar[SubscriptionType]
    SUB_SHARED: _ClassVar[SubscriptionType]
    SUB_FAILOVER: _ClassVar[SubscriptionType]
    SUB_KEY_SHARED: _ClassVar[SubscriptionType]

class InitialPosition(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INITIAL_LATEST: _ClassVar[InitialPosition]
    INITIAL_EARLIEST: _ClassVar[InitialPosition]

class AckType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACK_INDIVIDUAL: _ClassVar[AckType]
    ACK_CUMULATIVE: _ClassVar[AckType]

class TxnAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TXN_COMMIT: _ClassVar[TxnAction]
    TXN_ABORT: _ClassVar[TxnAction]

class TxnStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TXN_OPEN: _ClassVar[TxnStatus]
    TXN_COMMITTING: _ClassVar[TxnStatus]
    TXN_COMMITTED: _ClassVar[TxnStatus]
    TXN_ABORTING: _ClassVar[TxnStatus]
    TXN_ABORTED: _ClassVar[TxnStatus]
UNKNOWN_ERROR: ErrorCode
BAD_REQUEST: ErrorCode
SERVICE_NOT_READY: ErrorCode
PERSISTENCE_ERROR: ErrorCode
AUTHENTICATION_ERROR: ErrorCode
AUTHORIZATION_ERROR: ErrorCode
TOPIC_NOT_FOUND: ErrorCode
INVALID_TOPIC_NAME: ErrorCode
MESSAGE_TOO_BIG: ErrorCode
PRODUCER_BUSY: ErrorCode
PRODUCER_FENCED: ErrorCode
CONSUMER_BUSY: ErrorCode
NOT_OWNER: ErrorCode
SESSION_NOT_FOUND: ErrorCode
PRODUCER_NOT_FOUND: ErrorCode
CONSUMER_NOT_FOUND: ErrorCode
SUBSCRIPTION_NOT_FOUND: ErrorCode
NOT_ALLOWED: ErrorCode
TRANSACTION_COORDINATOR_NOT_FOUND: ErrorCode
TRANSACTION_NOT_FOUND: ErrorCode
INVALID_TXN_STATUS: ErrorCode
TRANSACTION_CONFLICT: ErrorCode
EXPIRED_TRANSACTION: ErrorCode
TOO_MANY_REQUESTS: ErrorCode
TENANT_NOT_FOUND: ErrorCode
NAMESPACE_NOT_FOUND: ErrorCode
CONFLICT: ErrorCode
TRANSACTION_KEY_NOT_FOUND: ErrorCode
PRODUCER_BLOCKED_QUOTA_EXCEEDED: ErrorCode
TOPIC_TERMINATED: ErrorCode
INCOMPATIBLE_SCHEMA: ErrorCode
ACCESS_SHARED: ProducerAccessMode
ACCESS_EXCLUSIVE: ProducerAccessMode
ACCESS_WAIT_FOR_EXCLUSIVE: ProducerAccessMode
ACCESS_EXCLUSIVE_WITH_FENCING: ProducerAccessMode
SUB_EXCLUSIVE: SubscriptionType
SUB_SHARED: SubscriptionType
SUB_FAILOVER: SubscriptionType
SUB_KEY_SHARED: SubscriptionType
INITIAL_LATEST: InitialPosition
INITIAL_EARLIEST: InitialPosition
ACK_INDIVIDUAL: AckType
ACK_CUMULATIVE: AckType
TXN_COMMIT: TxnAction
TXN_ABORT: TxnAction
TXN_OPEN: TxnStatus
TXN_COMMITTING: TxnStatus
TXN_COMMITTED: TxnStatus
TXN_ABORTING: TxnStatus
TXN_ABORTED: TxnStatus

class Error(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: ErrorCode
    message: str
    def __init__(self, code: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ...) -> None: ...

class BatchCall(_message.Message):
    __slots__ = ("path", "body")
    PATH_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    path: str
    body: bytes
    def __init__(self, path: _Optional[str] = ..., body: _Optional[bytes] = ...) -> None: ...

class BatchRequest(_message.Message):
    __slots__ = ("calls",)
    CALLS_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[BatchCall]
    def __init__(self, calls: _Optional[_Iterable[_Union[BatchCall, _Mapping]]] = ...) -> None: ...

class BatchResult(_message.Message):
    __slots__ = ("status", "body")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    status: int
    body: bytes
    def __init__(self, status: _Optional[int] = ..., body: _Optional[bytes] = ...) -> None: ...

class BatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[BatchResult]
    def __init__(self, results: _Optional[_Iterable[_Union[BatchResult, _Mapping]]] = ...) -> None: ...

class SingleMessage(_message.Message):
    __slots__ = ("payload", "partition_key", "properties", "sequence_id", "event_time", "ordering_key", "publish_time", "null_value", "partition_key_b64_encoded", "null_partition_key", "deliver_at_time", "schema_version", "pulsar_metadata")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PARTITION_KEY_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIME_FIELD_NUMBER: _ClassVar[int]
    ORDERING_KEY_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_TIME_FIELD_NUMBER: _ClassVar[int]
    NULL_VALUE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_KEY_B64_ENCODED_FIELD_NUMBER: _ClassVar[int]
    NULL_PARTITION_KEY_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_TIME_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    PULSAR_METADATA_FIELD_NUMBER: _ClassVar[int]
    payload: bytes
    partition_key: str
    properties: _containers.ScalarMap[str, str]
    sequence_id: int
    event_time: int
    ordering_key: bytes
    publish_time: int
    null_value: bool
    partition_key_b64_encoded: bool
    null_partition_key: bool
    deliver_at_time: int
    schema_version: int
    pulsar_metadata: bytes
    def __init__(self, payload: _Optional[bytes] = ..., partition_key: _Optional[str] = ..., properties: _Optional[_Mapping[str, str]] = ..., sequence_id: _Optional[int] = ..., event_time: _Optional[int] = ..., ordering_key: _Optional[bytes] = ..., publish_time: _Optional[int] = ..., null_value: _Optional[bool] = ..., partition_key_b64_encoded: _Optional[bool] = ..., null_partition_key: _Optional[bool] = ..., deliver_at_time: _Optional[int] = ..., schema_version: _Optional[int] = ..., pulsar_metadata: _Optional[bytes] = ...) -> None: ...

class MessageBatch(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[SingleMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[SingleMessage, _Mapping]]] = ...) -> None: ...

class MessageIdData(_message.Message):
    __slots__ = ("partition", "entry_id", "batch_index", "batch_size")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_INDEX_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    partition: int
    entry_id: int
    batch_index: int
    batch_size: int
    def __init__(self, partition: _Optional[int] = ..., entry_id: _Optional[int] = ..., batch_index: _Optional[int] = ..., batch_size: _Optional[int] = ...) -> None: ...

class Position(_message.Message):
    __slots__ = ("entry_id", "batch_index")
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_INDEX_FIELD_NUMBER: _ClassVar[int]
    entry_id: int
    batch_index: int
    def __init__(self, entry_id: _Optional[int] = ..., batch_index: _Optional[int] = ...) -> None: ...

class TxnId(_message.Message):
    __slots__ = ("most_bits", "least_bits")
    MOST_BITS_FIELD_NUMBER: _ClassVar[int]
    LEAST_BITS_FIELD_NUMBER: _ClassVar[int]
    most_bits: int
    least_bits: int
    def __init__(self, most_bits: _Optional[int] = ..., least_bits: _Optional[int] = ...) -> None: ...

class Schema(_message.Message):
    __slots__ = ("type", "data", "properties")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TYPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    type: str
    data: bytes
    properties: _containers.ScalarMap[str, str]
    def __init__(self, type: _Optional[str] = ..., data: _Optional[bytes] = ..., properties: _Optional[_Mapping[str, str]] = ...) -> None: ...

class PartitionMetadataRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class PartitionMetadataResponse(_message.Message):
    __slots__ = ("topic", "partitions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: int
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[int] = ...) -> None: ...

class LookupRequest(_message.Message):
    __slots__ = ("topic", "listener_name")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    LISTENER_NAME_FIELD_NUMBER: _ClassVar[int]
    topic: str
    listener_name: str
    def __init__(self, topic: _Optional[str] = ..., listener_name: _Optional[str] = ...) -> None: ...

class LookupResponse(_message.Message):
    __slots__ = ("topic", "broker_url", "broker_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BROKER_URL_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    broker_url: str
    broker_id: str
    def __init__(self, topic: _Optional[str] = ..., broker_url: _Optional[str] = ..., broker_id: _Optional[str] = ...) -> None: ...

class OpenSessionRequest(_message.Message):
    __slots__ = ("client_name",)
    CLIENT_NAME_FIELD_NUMBER: _ClassVar[int]
    client_name: str
    def __init__(self, client_name: _Optional[str] = ...) -> None: ...

class OpenSessionResponse(_message.Message):
    __slots__ = ("session_id", "keepalive_interval_ms", "session_timeout_ms")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    KEEPALIVE_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    keepalive_interval_ms: int
    session_timeout_ms: int
    def __init__(self, session_id: _Optional[str] = ..., keepalive_interval_ms: _Optional[int] = ..., session_timeout_ms: _Optional[int] = ...) -> None: ...

class KeepAliveRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class KeepAliveResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CreateProducerRequest(_message.Message):
    __slots__ = ("session_id", "topic", "producer_name", "access_mode", "topic_epoch", "user_provided_name", "wait_ms", "client_producer_id", "schema")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_NAME_FIELD_NUMBER: _ClassVar[int]
    ACCESS_MODE_FIELD_NUMBER: _ClassVar[int]
    TOPIC_EPOCH_FIELD_NUMBER: _ClassVar[int]
    USER_PROVIDED_NAME_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    topic: str
    producer_name: str
    access_mode: ProducerAccessMode
    topic_epoch: int
    user_provided_name: bool
    wait_ms: int
    client_producer_id: int
    schema: Schema
    def __init__(self, session_id: _Optional[str] = ..., topic: _Optional[str] = ..., producer_name: _Optional[str] = ..., access_mode: _Optional[_Union[ProducerAccessMode, str]] = ..., topic_epoch: _Optional[int] = ..., user_provided_name: _Optional[bool] = ..., wait_ms: _Optional[int] = ..., client_producer_id: _Optional[int] = ..., schema: _Optional[_Union[Schema, _Mapping]] = ...) -> None: ...

class CreateProducerResponse(_message.Message):
    __slots__ = ("producer_id", "producer_name", "last_sequence_id", "topic_epoch", "max_message_size", "waiting", "schema_version")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_NAME_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    producer_name: str
    last_sequence_id: int
    topic_epoch: int
    max_message_size: int
    waiting: bool
    schema_version: int
    def __init__(self, producer_id: _Optional[int] = ..., producer_name: _Optional[str] = ..., last_sequence_id: _Optional[int] = ..., topic_epoch: _Optional[int] = ..., max_message_size: _Optional[int] = ..., waiting: _Optional[bool] = ..., schema_version: _Optional[int] = ...) -> None: ...

class SendRequest(_message.Message):
    __slots__ = ("producer_id", "batch", "num_messages", "sequence_id", "highest_sequence_id", "txn", "deliver_at_time", "session_id")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    NUM_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    HIGHEST_SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    TXN_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_TIME_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    batch: bytes
    num_messages: int
    sequence_id: int
    highest_sequence_id: int
    txn: TxnId
    deliver_at_time: int
    session_id: str
    def __init__(self, producer_id: _Optional[int] = ..., batch: _Optional[bytes] = ..., num_messages: _Optional[int] = ..., sequence_id: _Optional[int] = ..., highest_sequence_id: _Optional[int] = ..., txn: _Optional[_Union[TxnId, _Mapping]] = ..., deliver_at_time: _Optional[int] = ..., session_id: _Optional[str] = ...) -> None: ...

class SendResponse(_message.Message):
    __slots__ = ("entry_id", "duplicate", "last_sequence_id", "partition")
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    entry_id: int
    duplicate: bool
    last_sequence_id: int
    partition: int
    def __init__(self, entry_id: _Optional[int] = ..., duplicate: _Optional[bool] = ..., last_sequence_id: _Optional[int] = ..., partition: _Optional[int] = ...) -> None: ...

class SendBatchesRequest(_message.Message):
    __slots__ = ("batches", "session_id")
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    batches: _containers.RepeatedCompositeFieldContainer[SendRequest]
    session_id: str
    def __init__(self, batches: _Optional[_Iterable[_Union[SendRequest, _Mapping]]] = ..., session_id: _Optional[str] = ...) -> None: ...

class SendResult(_message.Message):
    __slots__ = ("response", "error")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    response: SendResponse
    error: Error
    def __init__(self, response: _Optional[_Union[SendResponse, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class SendBatchesResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SendResult]
    def __init__(self, results: _Optional[_Iterable[_Union[SendResult, _Mapping]]] = ...) -> None: ...

class CloseProducerRequest(_message.Message):
    __slots__ = ("producer_id", "session_id")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    session_id: str
    def __init__(self, producer_id: _Optional[int] = ..., session_id: _Optional[str] = ...) -> None: ...

class CloseProducerResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("session_id", "topic", "subscription", "sub_type", "initial_position", "consumer_name", "priority_level", "durable", "start_position", "start_inclusive", "dead_letter_policy", "schema", "read_compacted")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SUB_TYPE_FIELD_NUMBER: _ClassVar[int]
    INITIAL_POSITION_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_NAME_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    DURABLE_FIELD_NUMBER: _ClassVar[int]
    START_POSITION_FIELD_NUMBER: _ClassVar[int]
    START_INCLUSIVE_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_POLICY_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    READ_COMPACTED_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    topic: str
    subscription: str
    sub_type: SubscriptionType
    initial_position: InitialPosition
    consumer_name: str
    priority_level: int
    durable: bool
    start_position: Position
    start_inclusive: bool
    dead_letter_policy: DeadLetterPolicy
    schema: Schema
    read_compacted: bool
    def __init__(self, session_id: _Optional[str] = ..., topic: _Optional[str] = ..., subscription: _Optional[str] = ..., sub_type: _Optional[_Union[SubscriptionType, str]] = ..., initial_position: _Optional[_Union[InitialPosition, str]] = ..., consumer_name: _Optional[str] = ..., priority_level: _Optional[int] = ..., durable: _Optional[bool] = ..., start_position: _Optional[_Union[Position, _Mapping]] = ..., start_inclusive: _Optional[bool] = ..., dead_letter_policy: _Optional[_Union[DeadLetterPolicy, _Mapping]] = ..., schema: _Optional[_Union[Schema, _Mapping]] = ..., read_compacted: _Optional[bool] = ...) -> None: ...

class DeadLetterPolicy(_message.Message):
    __slots__ = ("max_redeliver_count", "dead_letter_topic", "initial_subscription_name", "retry_letter_topic")
    MAX_REDELIVER_COUNT_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    INITIAL_SUBSCRIPTION_NAME_FIELD_NUMBER: _ClassVar[int]
    RETRY_LETTER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    max_redeliver_count: int
    dead_letter_topic: str
    initial_subscription_name: str
    retry_letter_topic: str
    def __init__(self, max_redeliver_count: _Optional[int] = ..., dead_letter_topic: _Optional[str] = ..., initial_subscription_name: _Optional[str] = ..., retry_letter_topic: _Optional[str] = ...) -> None: ...

class SubscribeResponse(_message.Message):
    __slots__ = ("consumer_id",)
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_id: int
    def __init__(self, consumer_id: _Optional[int] = ...) -> None: ...

class DeliveredEntry(_message.Message):
    __slots__ = ("entry_id", "batch", "num_messages", "publish_time", "producer_name", "indices", "redelivery_counts")
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    NUM_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_TIME_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_NAME_FIELD_NUMBER: _ClassVar[int]
    INDICES_FIELD_NUMBER: _ClassVar[int]
    REDELIVERY_COUNTS_FIELD_NUMBER: _ClassVar[int]
    entry_id: int
    batch: bytes
    num_messages: int
    publish_time: int
    producer_name: str
    indices: _containers.RepeatedScalarFieldContainer[int]
    redelivery_counts: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, entry_id: _Optional[int] = ..., batch: _Optional[bytes] = ..., num_messages: _Optional[int] = ..., publish_time: _Optional[int] = ..., producer_name: _Optional[str] = ..., indices: _Optional[_Iterable[int]] = ..., redelivery_counts: _Optional[_Iterable[int]] = ...) -> None: ...

class FetchRequest(_message.Message):
    __slots__ = ("consumer_id", "max_messages", "wait_ms", "seeks", "session_id")
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    SEEKS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_id: int
    max_messages: int
    wait_ms: int
    seeks: int
    session_id: str
    def __init__(self, consumer_id: _Optional[int] = ..., max_messages: _Optional[int] = ..., wait_ms: _Optional[int] = ..., seeks: _Optional[int] = ..., session_id: _Optional[str] = ...) -> None: ...

class FetchResponse(_message.Message):
    __slots__ = ("entries", "partition", "end_of_topic")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    END_OF_TOPIC_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[DeliveredEntry]
    partition: int
    end_of_topic: bool
    def __init__(self, entries: _Optional[_Iterable[_Union[DeliveredEntry, _Mapping]]] = ..., partition: _Optional[int] = ..., end_of_topic: _Optional[bool] = ...) -> None: ...

class AckRequest(_message.Message):
    __slots__ = ("consumer_id", "ack_type", "positions", "txn", "hold_ms", "session_id")
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    ACK_TYPE_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    TXN_FIELD_NUMBER: _ClassVar[int]
    HOLD_MS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_id: int
    ack_type: AckType
    positions: _containers.RepeatedCompositeFieldContainer[Position]
    txn: TxnId
    hold_ms: int
    session_id: str
    def __init__(self, consumer_id: _Optional[int] = ..., ack_type: _Optional[_Union[AckType, str]] = ..., positions: _Optional[_Iterable[_Union[Position, _Mapping]]] = ..., txn: _Optional[_Union[TxnId, _Mapping]] = ..., hold_ms: _Optional[int] = ..., session_id: _Optional[str] = ...) -> None: ...

class AckResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RedeliverRequest(_message.Message):
    __slots__ = ("consumer_id", "positions", "seeks", "session_id")
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    SEEKS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_id: int
    positions: _containers.RepeatedCompositeFieldContainer[Position]
    seeks: int
    session_id: str
    def __init__(self, consumer_id: _Optional[int] = ..., positions: _Optional[_Iterable[_Union[Position, _Mapping]]] = ..., seeks: _Optional[int] = ..., session_id: _Optional[str] = ...) -> None: ...

class RedeliverResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SeekRequest(_message.Message):
    __slots__ = ("consumer_id", "position", "publish_time", "seeks", "session_id")
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_TIME_FIELD_NUMBER: _ClassVar[int]
    SEEKS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_id: int
    position: Position
    publish_time: int
    seeks: int
    session_id: str
    def __init__(self, consumer_id: _Optional[int] = ..., position: _Optional[_Union[Position, _Mapping]] = ..., publish_time: _Optional[int] = ..., seeks: _Optional[int] = ..., session_id: _Optional[str] = ...) -> None: ...

class SeekResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LastMessageIdRequest(_message.Message):
    __slots__ = ("consumer_id", "session_id")
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_id: int
    session_id: str
    def __init__(self, consumer_id: _Optional[int] = ..., session_id: _Optional[str] = ...) -> None: ...

class LastMessageIdResponse(_message.Message):
    __slots__ = ("has_message", "last", "mark_delete")
    HAS_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    MARK_DELETE_FIELD_NUMBER: _ClassVar[int]
    has_message: bool
    last: MessageIdData
    mark_delete: Position
    def __init__(self, has_message: _Optional[bool] = ..., last: _Optional[_Union[MessageIdData, _Mapping]] = ..., mark_delete: _Optional[_Union[Position, _Mapping]] = ...) -> None: ...

class CloseConsumerRequest(_message.Message):
    __slots__ = ("consumer_id", "unsubscribe", "session_id")
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    UNSUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_id: int
    unsubscribe: bool
    session_id: str
    def __init__(self, consumer_id: _Optional[int] = ..., unsubscribe: _Optional[bool] = ..., session_id: _Optional[str] = ...) -> None: ...

class CloseConsumerResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DeadLetterAppendRequest(_message.Message):
    __slots__ = ("topic", "initial_subscription", "producer_name", "batch", "num_messages", "source_topic_id", "source_topic", "source_broker", "source_epoch", "subscription", "mark_delete", "acked_state", "deliver_at_time")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    INITIAL_SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_NAME_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    NUM_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TOPIC_FIELD_NUMBER: _ClassVar[int]
    SOURCE_BROKER_FIELD_NUMBER: _ClassVar[int]
    SOURCE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    MARK_DELETE_FIELD_NUMBER: _ClassVar[int]
    ACKED_STATE_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_TIME_FIELD_NUMBER: _ClassVar[int]
    topic: str
    initial_subscription: str
    producer_name: str
    batch: bytes
    num_messages: int
    source_topic_id: int
    source_topic: str
    source_broker: str
    source_epoch: int
    subscription: str
    mark_delete: int
    acked_state: bytes
    deliver_at_time: int
    def __init__(self, topic: _Optional[str] = ..., initial_subscription: _Optional[str] = ..., producer_name: _Optional[str] = ..., batch: _Optional[bytes] = ..., num_messages: _Optional[int] = ..., source_topic_id: _Optional[int] = ..., source_topic: _Optional[str] = ..., source_broker: _Optional[str] = ..., source_epoch: _Optional[int] = ..., subscription: _Optional[str] = ..., mark_delete: _Optional[int] = ..., acked_state: _Optional[bytes] = ..., deliver_at_time: _Optional[int] = ...) -> None: ...

class DeadLetterAppendResponse(_message.Message):
    __slots__ = ("entry_id",)
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    entry_id: int
    def __init__(self, entry_id: _Optional[int] = ...) -> None: ...

class CursorState(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[EntryAcks]
    def __init__(self, entries: _Optional[_Iterable[_Union[EntryAcks, _Mapping]]] = ...) -> None: ...

class EntryAcks(_message.Message):
    __slots__ = ("entry_id", "acked_bitset")
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    ACKED_BITSET_FIELD_NUMBER: _ClassVar[int]
    entry_id: int
    acked_bitset: bytes
    def __init__(self, entry_id: _Optional[int] = ..., acked_bitset: _Optional[bytes] = ...) -> None: ...

class CoordinatorInfo(_message.Message):
    __slots__ = ("coordinator_id", "url")
    COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    coordinator_id: int
    url: str
    def __init__(self, coordinator_id: _Optional[int] = ..., url: _Optional[str] = ...) -> None: ...

class LookupCoordinatorsRequest(_message.Message):
    __slots__ = ("listener_name",)
    LISTENER_NAME_FIELD_NUMBER: _ClassVar[int]
    listener_name: str
    def __init__(self, listener_name: _Optional[str] = ...) -> None: ...

class LookupCoordinatorsResponse(_message.Message):
    __slots__ = ("coordinators",)
    COORDINATORS_FIELD_NUMBER: _ClassVar[int]
    coordinators: _containers.RepeatedCompositeFieldContainer[CoordinatorInfo]
    def __init__(self, coordinators: _Optional[_Iterable[_Union[CoordinatorInfo, _Mapping]]] = ...) -> None: ...

class NewTxnRequest(_message.Message):
    __slots__ = ("timeout_ms", "client_name", "transaction_key", "key_epoch", "count", "hold_ms")
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_NAME_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_KEY_FIELD_NUMBER: _ClassVar[int]
    KEY_EPOCH_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    HOLD_MS_FIELD_NUMBER: _ClassVar[int]
    timeout_ms: int
    client_name: str
    transaction_key: str
    key_epoch: int
    count: int
    hold_ms: int
    def __init__(self, timeout_ms: _Optional[int] = ..., client_name: _Optional[str] = ..., transaction_key: _Optional[str] = ..., key_epoch: _Optional[int] = ..., count: _Optional[int] = ..., hold_ms: _Optional[int] = ...) -> None: ...

class NewTxnResponse(_message.Message):
    __slots__ = ("txn", "timeout_ms", "more_least_bits")
    TXN_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MORE_LEAST_BITS_FIELD_NUMBER: _ClassVar[int]
    txn: TxnId
    timeout_ms: int
    more_least_bits: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, txn: _Optional[_Union[TxnId, _Mapping]] = ..., timeout_ms: _Optional[int] = ..., more_least_bits: _Optional[_Iterable[int]] = ...) -> None: ...

class AddPartitionToTxnRequest(_message.Message):
    __slots__ = ("txn", "topics")
    TXN_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    txn: TxnId
    topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, txn: _Optional[_Union[TxnId, _Mapping]] = ..., topics: _Optional[_Iterable[str]] = ...) -> None: ...

class AddPartitionToTxnResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TxnSubscription(_message.Message):
    __slots__ = ("topic", "subscription")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    subscription: str
    def __init__(self, topic: _Optional[str] = ..., subscription: _Optional[str] = ...) -> None: ...

class AddSubscriptionToTxnRequest(_message.Message):
    __slots__ = ("txn", "subscriptions")
    TXN_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    txn: TxnId
    subscriptions: _containers.RepeatedCompositeFieldContainer[TxnSubscription]
    def __init__(self, txn: _Optional[_Union[TxnId, _Mapping]] = ..., subscriptions: _Optional[_Iterable[_Union[TxnSubscription, _Mapping]]] = ...) -> None: ...

class AddSubscriptionToTxnResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AddParticipantsToTxnRequest(_message.Message):
    __slots__ = ("txn", "topics", "subscriptions")
    TXN_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    txn: TxnId
    topics: _containers.RepeatedScalarFieldContainer[str]
    subscriptions: _containers.RepeatedCompositeFieldContainer[TxnSubscription]
    def __init__(self, txn: _Optional[_Union[TxnId, _Mapping]] = ..., topics: _Optional[_Iterable[str]] = ..., subscriptions: _Optional[_Iterable[_Union[TxnSubscription, _Mapping]]] = ...) -> None: ...

class AddParticipantsToTxnResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EndTxnRequest(_message.Message):
    __slots__ = ("txn", "action", "expired")
    TXN_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    EXPIRED_FIELD_NUMBER: _ClassVar[int]
    txn: TxnId
    action: TxnAction
    expired: bool
    def __init__(self, txn: _Optional[_Union[TxnId, _Mapping]] = ..., action: _Optional[_Union[TxnAction, str]] = ..., expired: _Optional[bool] = ...) -> None: ...

class EndTxnResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: TxnStatus
    def __init__(self, status: _Optional[_Union[TxnStatus, str]] = ...) -> None: ...

class EndTxnOneRequestRequest(_message.Message):
    __slots__ = ("txn", "action", "sends", "acks")
    TXN_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    SENDS_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    txn: TxnId
    action: TxnAction
    sends: _containers.RepeatedCompositeFieldContainer[KeptSend]
    acks: _containers.RepeatedCompositeFieldContainer[HeldAcks]
    def __init__(self, txn: _Optional[_Union[TxnId, _Mapping]] = ..., action: _Optional[_Union[TxnAction, str]] = ..., sends: _Optional[_Iterable[_Union[KeptSend, _Mapping]]] = ..., acks: _Optional[_Iterable[_Union[HeldAcks, _Mapping]]] = ...) -> None: ...

class KeptSend(_message.Message):
    __slots__ = ("topic", "producer_id", "session_id", "batch", "num_messages", "sequence_id", "highest_sequence_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    NUM_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    HIGHEST_SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    producer_id: int
    session_id: str
    batch: bytes
    num_messages: int
    sequence_id: int
    highest_sequence_id: int
    def __init__(self, topic: _Optional[str] = ..., producer_id: _Optional[int] = ..., session_id: _Optional[str] = ..., batch: _Optional[bytes] = ..., num_messages: _Optional[int] = ..., sequence_id: _Optional[int] = ..., highest_sequence_id: _Optional[int] = ...) -> None: ...

class HeldAcks(_message.Message):
    __slots__ = ("topic", "subscription", "positions", "cumulative")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    CUMULATIVE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    subscription: str
    positions: _containers.RepeatedCompositeFieldContainer[Position]
    cumulative: bool
    def __init__(self, topic: _Optional[str] = ..., subscription: _Optional[str] = ..., positions: _Optional[_Iterable[_Union[Position, _Mapping]]] = ..., cumulative: _Optional[bool] = ...) -> None: ...

class TxnStatusRequest(_message.Message):
    __slots__ = ("txn",)
    TXN_FIELD_NUMBER: _ClassVar[int]
    txn: TxnId
    def __init__(self, txn: _Optional[_Union[TxnId, _Mapping]] = ...) -> None: ...

class TxnStatusResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: TxnStatus
    def __init__(self, status: _Optional[_Union[TxnStatus, str]] = ...) -> None: ...

class EndTxnOnPartitionRequest(_message.Message):
    __slots__ = ("topic", "txn", "action")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TXN_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    txn: TxnId
    action: TxnAction
    def __init__(self, topic: _Optional[str] = ..., txn: _Optional[_Union[TxnId, _Mapping]] = ..., action: _Optional[_Union[TxnAction, str]] = ...) -> None: ...

class EndTxnOnPartitionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EndTxnOnSubscriptionRequest(_message.Message):
    __slots__ = ("topic", "subscription", "txn", "action")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    TXN_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    subscription: str
    txn: TxnId
    action: TxnAction
    def __init__(self, topic: _Optional[str] = ..., subscription: _Optional[str] = ..., txn: _Optional[_Union[TxnId, _Mapping]] = ..., action: _Optional[_Union[TxnAction, str]] = ...) -> None: ...

class EndTxnOnSubscriptionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EndTxnOnParticipantsRequest(_message.Message):
    __slots__ = ("txn", "action", "partitions", "subscriptions")
    TXN_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    txn: TxnId
    action: TxnAction
    partitions: _containers.RepeatedScalarFieldContainer[str]
    subscriptions: _containers.RepeatedCompositeFieldContainer[TxnSubscription]
    def __init__(self, txn: _Optional[_Union[TxnId, _Mapping]] = ..., action: _Optional[_Union[TxnAction, str]] = ..., partitions: _Optional[_Iterable[str]] = ..., subscriptions: _Optional[_Iterable[_Union[TxnSubscription, _Mapping]]] = ...) -> None: ...

class ParticipantError(_message.Message):
    __slots__ = ("topic", "subscription", "error")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    topic: str
    subscription: str
    error: Error
    def __init__(self, topic: _Optional[str] = ..., subscription: _Optional[str] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class EndTxnOnParticipantsResponse(_message.Message):
    __slots__ = ("errors",)
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    errors: _containers.RepeatedCompositeFieldContainer[ParticipantError]
    def __init__(self, errors: _Optional[_Iterable[_Union[ParticipantError, _Mapping]]] = ...) -> None: ...

class LookupRegistryRequest(_message.Message):
    __slots__ = ("listener_name",)
    LISTENER_NAME_FIELD_NUMBER: _ClassVar[int]
    listener_name: str
    def __init__(self, listener_name: _Optional[str] = ...) -> None: ...

class LookupRegistryResponse(_message.Message):
    __slots__ = ("urls",)
    URLS_FIELD_NUMBER: _ClassVar[int]
    urls: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, urls: _Optional[_Iterable[str]] = ...) -> None: ...

class ConnectKeyRequest(_message.Message):
    __slots__ = ("transaction_key", "epoch")
    TRANSACTION_KEY_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    transaction_key: str
    epoch: int
    def __init__(self, transaction_key: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class ConnectKeyResponse(_message.Message):
    __slots__ = ("epoch", "coordinator_id", "coordinator_url")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_URL_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    coordinator_id: int
    coordinator_url: str
    def __init__(self, epoch: _Optional[int] = ..., coordinator_id: _Optional[int] = ..., coordinator_url: _Optional[str] = ...) -> None: ...

class DeleteKeyRequest(_message.Message):
    __slots__ = ("owner", "transaction_key")
    OWNER_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_KEY_FIELD_NUMBER: _ClassVar[int]
    owner: str
    transaction_key: str
    def __init__(self, owner: _Optional[str] = ..., transaction_key: _Optional[str] = ...) -> None: ...

class DeleteKeyResponse(_message.Message):
    __slots__ = ("aborted",)
    ABORTED_FIELD_NUMBER: _ClassVar[int]
    aborted: _containers.RepeatedCompositeFieldContainer[TxnId]
    def __init__(self, aborted: _Optional[_Iterable[_Union[TxnId, _Mapping]]] = ...) -> None: ...

class SchemaVersion(_message.Message):
    __slots__ = ("version", "schema", "timestamp", "deleted")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    version: int
    schema: Schema
    timestamp: int
    deleted: bool
    def __init__(self, version: _Optional[int] = ..., schema: _Optional[_Union[Schema, _Mapping]] = ..., timestamp: _Optional[int] = ..., deleted: _Optional[bool] = ...) -> None: ...

class GetSchemaRequest(_message.Message):
    __slots__ = ("topic", "version")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    version: int
    def __init__(self, topic: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class GetSchemaResponse(_message.Message):
    __slots__ = ("schema",)
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    schema: SchemaVersion
    def __init__(self, schema: _Optional[_Union[SchemaVersion, _Mapping]] = ...) -> None: ...

class ListSchemasRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class ListSchemasResponse(_message.Message):
    __slots__ = ("versions",)
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.RepeatedCompositeFieldContainer[SchemaVersion]
    def __init__(self, versions: _Optional[_Iterable[_Union[SchemaVersion, _Mapping]]] = ...) -> None: ...

class CreateSchemaRequest(_message.Message):
    __slots__ = ("topic", "schema", "admin")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    topic: str
    schema: Schema
    admin: bool
    def __init__(self, topic: _Optional[str] = ..., schema: _Optional[_Union[Schema, _Mapping]] = ..., admin: _Optional[bool] = ...) -> None: ...

class CreateSchemaResponse(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: int
    def __init__(self, version: _Optional[int] = ...) -> None: ...

class DeleteSchemaRequest(_message.Message):
    __slots__ = ("topic", "force")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    force: bool
    def __init__(self, topic: _Optional[str] = ..., force: _Optional[bool] = ...) -> None: ...

class DeleteSchemaResponse(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: int
    def __init__(self, version: _Optional[int] = ...) -> None: ...

class CheckSchemaRequest(_message.Message):
    __slots__ = ("topic", "schema")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    topic: str
    schema: Schema
    def __init__(self, topic: _Optional[str] = ..., schema: _Optional[_Union[Schema, _Mapping]] = ...) -> None: ...

class CheckSchemaResponse(_message.Message):
    __slots__ = ("compatible", "strategy", "reason", "version")
    COMPATIBLE_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    compatible: bool
    strategy: str
    reason: str
    version: int
    def __init__(self, compatible: _Optional[bool] = ..., strategy: _Optional[str] = ..., reason: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...
