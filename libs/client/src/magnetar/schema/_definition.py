"""Records and their fields, with the names and behaviour of ``pulsar.schema``'s (so a
Pulsar application's record classes work unchanged): a ``Record`` subclass declares its
fields as class attributes, checks the type of every value set on it, and describes
itself as an Avro record schema (``Record.schema()``) that both AvroSchema and
JsonSchema register.

The schema a class describes is the one pulsar-client describes for the same class, key
for key (a field is nullable unless ``required=True``; its ``default`` is part of the
schema only with ``required_default=True``), so the two clients register one schema
version, not two, for one class.
"""

from __future__ import annotations

import copy
import enum


class Field:
    """A field of a Record: its Avro type, the Python types it takes, its default."""

    avro_type = ""
    python_types: tuple[type, ...] = ()
    implicit_default: object = None   # the value a field nobody set holds

    def __init__(self, default=None, required: bool = False, required_default: bool = False) -> None:
        self._required = required
        self._required_default = required_default
        self._default = None if default is None else self.validate_type("default", default)

    # pulsar.schema's names, which applications and its tests call
    def type(self) -> str:
        return self.avro_type

    def python_type(self):
        return self.python_types

    def default(self):
        return self.implicit_default if self._default is None else self._default

    def required_default(self) -> bool:
        return self._required_default

    def schema(self):
        return self.schema_info(set())

    def schema_info(self, defined_names: set[str]):
        """This field's Avro type (``defined_names``: the named types already described
        in the enclosing schema, which are referred to by name the second time)."""
        return self.avro_type

    def validate_type(self, name: str, value):
        """The value to store for ``name`` (the default for None when the field is
        optional), or TypeError."""
        if value is None and not self._required:
            return self.default()
        if isinstance(value, bool) and bool not in self.python_types:
            raise TypeError(f"field {name!r}: {value!r} is a bool, not {self._expected()}")
        if not isinstance(value, self.python_types):
            raise TypeError(f"field {name!r}: {type(value).__name__} given, {self._expected()} expected")
        return value

    def _expected(self) -> str:
        return " or ".join(t.__name__ for t in self.python_types)

    def to_plain(self, value):
        """The value as Avro's writer wants it (Records become dicts, enums their names)."""
        return value

    def from_plain(self, value):
        """A decoded value back into what the record holds."""
        return value


class Null(Field):
    avro_type = "null"
    python_types = (type(None),)

    def validate_type(self, name, value):
        if value is not None:
            raise TypeError(f"field {name!r} is a Null field: only None")
        return value


class Boolean(Field):
    avro_type = "boolean"
    python_types = (bool,)
    implicit_default = False


class Integer(Field):
    avro_type = "int"
    python_types = (int,)


class Long(Field):
    avro_type = "long"
    python_types = (int,)


class Float(Field):
    avro_type = "float"
    python_types = (float, int)


class Double(Field):
    avro_type = "double"
    python_types = (float, int)


class Bytes(Field):
    avro_type = "bytes"
    python_types = (bytes, str)

    def validate_type(self, name, value):
        value = super().validate_type(name, value)
        return value.encode() if isinstance(value, str) else value


class String(Field):
    avro_type = "string"
    python_types = (str, bytes)

    def validate_type(self, name, value):
        value = super().validate_type(name, value)
        return value.decode() if isinstance(value, bytes) else value


class CustomEnum(Field):
    """A Python Enum as an Avro enum (its symbols are the members' names)."""

    avro_type = "enum"

    def __init__(self, enum_type, default=None, required: bool = False, required_default: bool = False) -> None:
        if not (isinstance(enum_type, type) and issubclass(enum_type, enum.Enum)):
            raise TypeError(f"{enum_type!r} is not an Enum class")
        self.enum_type = enum_type
        self.python_types = (enum_type,)
        super().__init__(default, required, required_default)

    def validate_type(self, name, value):
        if value is None:
            return None
        if isinstance(value, self.enum_type):
            return value
        if isinstance(value, str):     # a member's name (Avro's symbol)
            if value in self.enum_type.__members__:
                return self.enum_type[value]
        elif isinstance(value, int) and not isinstance(value, bool):   # a member's value (JSON's)
            for member in self.enum_type:
                if member.value == value:
                    return member
        raise TypeError(f"field {name!r}: {value!r} is not one of {list(self.enum_type.__members__)}")

    def schema_info(self, defined_names):
        name = self.enum_type.__name__
        if name in defined_names:
            return name
        defined_names.add(name)
        return {"type": "enum", "name": name, "symbols": list(self.enum_type.__members__)}

    def to_plain(self, value):
        return None if value is None else value.name

    def from_plain(self, value):
        return self.validate_type("value", value)


def _element(kind, what: str) -> Field | Record:
    """An Array's or Map's element type: a Field or a Record instance (a Record class is
    taken as its instance, as in a record's own fields)."""
    if isinstance(kind, type) and issubclass(kind, Record):
        kind = kind()
    if not isinstance(kind, (Field, Record)):
        raise TypeError(f"the {what} of an Array or Map must be a Field or a Record, not {kind!r}")
    return kind


class Array(Field):
    avro_type = "array"
    python_types = (list,)

    def __init__(self, array_type, default=None, required: bool = False, required_default: bool = False) -> None:
        self.array_type = _element(array_type, "items")
        super().__init__(default, required, required_default)

    def validate_type(self, name, value):
        if value is None:
            return None
        value = super().validate_type(name, value)
        return [_element_value(self.array_type, f"{name}[{i}]", item) for i, item in enumerate(value)]

    def schema_info(self, defined_names):
        return {"type": "array", "items": self.array_type.schema_info(defined_names)}

    def to_plain(self, value):
        return None if value is None else [self.array_type.to_plain(v) for v in value]

    def from_plain(self, value):
        return None if value is None else [self.array_type.from_plain(v) for v in value]


class Map(Field):
    """A map with string keys."""

    avro_type = "map"
    python_types = (dict,)

    def __init__(self, value_type, default=None, required: bool = False, required_default: bool = False) -> None:
        self.value_type = _element(value_type, "values")
        super().__init__(default, required, required_default)

    def validate_type(self, name, value):
        if value is None:
            return None
        value = super().validate_type(name, value)
        for key in value:
            if not isinstance(key, str):
                raise TypeError(f"field {name!r}: map keys are strings, not {type(key).__name__}")
        return {k: _element_value(self.value_type, f"{name}[{k!r}]", v) for k, v in value.items()}

    def schema_info(self, defined_names):
        return {"type": "map", "values": self.value_type.schema_info(defined_names)}

    def to_plain(self, value):
        return None if value is None else {k: self.value_type.to_plain(v) for k, v in value.items()}

    def from_plain(self, value):
        return None if value is None else {k: self.value_type.from_plain(v) for k, v in value.items()}


def _element_value(kind: Field | Record, name: str, value):
    if isinstance(kind, Record):
        if isinstance(value, dict):   # a nested record given as a dict
            return type(kind)(**value)
        if not isinstance(value, type(kind)):
            raise TypeError(f"{name}: {type(value).__name__} given, {type(kind).__name__} expected")
        return value
    return kind.validate_type(name, value)


# ---------------------------------------------------------------- records


class RecordMeta(type):
    """Collects a Record class's fields, in declaration order: Field instances, Record
    classes or instances (nested records) and Enum classes."""

    _fields: dict[str, Field | Record]

    def __new__(mcs, name, bases, namespace):
        cls = super().__new__(mcs, name, bases, namespace)
        fields: dict[str, Field | Record] = {}
        for base in reversed(cls.__mro__[1:]):
            fields.update(getattr(base, "_fields", {}))
        for key, value in namespace.items():
            if key.startswith("_"):
                continue
            if isinstance(value, type) and issubclass(value, enum.Enum):
                value = CustomEnum(value)
            elif isinstance(value, RecordMeta):
                value = value()
            if isinstance(value, Field) or isinstance(type(value), RecordMeta):
                fields[key] = value
        cls._fields = fields
        return cls


class Record(metaclass=RecordMeta):
    """A record: subclass it and declare fields (``a = Integer()``); construct it with
    keyword values (``Example(a=1)``; unset fields hold their defaults)."""

    _fields: dict[str, Field | Record]
    _default: Record | None
    _required: bool
    _required_default: bool
    _avro_namespace: str | None = None   # the Avro schema's namespace
    _sorted_fields = False               # the schema lists the fields by name

    def __init__(self, default=None, required_default: bool = False, required: bool = False, **values) -> None:
        # As a nested record's declaration (``inner = Inner(required=True)``) these say
        # what Field's do; as a value they are unused.
        object.__setattr__(self, "_default", default)
        object.__setattr__(self, "_required", required)
        object.__setattr__(self, "_required_default", required_default)
        unknown = set(values) - set(self._fields)
        if unknown:
            raise AttributeError(f"{type(self).__name__} has no field(s) {sorted(unknown)}")
        for name, kind in self._fields.items():
            if name in values:
                setattr(self, name, values[name])
            elif isinstance(kind, Record):
                object.__setattr__(self, name, copy.copy(kind))
            else:
                object.__setattr__(self, name, kind.default())

    def __setattr__(self, name: str, value) -> None:
        kind = self._fields.get(name)
        if kind is None:
            raise AttributeError(f"{type(self).__name__} has no field {name!r}")
        if isinstance(kind, Record):
            value = kind._validate_nested(name, value)
        else:
            value = kind.validate_type(name, value)
        object.__setattr__(self, name, value)

    def _validate_nested(self, name: str, value):
        if value is None and not self._required:
            return self._default
        if isinstance(value, dict):
            return type(self)(**value)
        if not isinstance(value, type(self)):
            raise TypeError(f"field {name!r}: {type(value).__name__} given, {type(self).__name__} expected")
        return value

    # -------------------------------------------------------------- the schema

    @classmethod
    def schema(cls) -> dict:
        """The class's Avro record schema (a dict)."""
        return cls.schema_info(set())

    @classmethod
    def schema_info(cls, defined_names: set[str]):
        full = f"{cls._avro_namespace}.{cls.__name__}" if cls._avro_namespace else cls.__name__
        if full in defined_names:
            return full
        defined_names.add(full)
        described: dict = {"type": "record", "name": cls.__name__}
        if cls._avro_namespace is not None:
            described["namespace"] = cls._avro_namespace
        names = sorted(cls._fields) if cls._sorted_fields else list(cls._fields)
        fields = []
        for name in names:
            kind = cls._fields[name]
            avro = kind.schema_info(defined_names)
            entry: dict = {"name": name}
            if kind._required_default:
                default = kind.default()
                entry["default"] = default.name if isinstance(default, enum.Enum) else default
            entry["type"] = avro if kind._required else ["null", avro]
            fields.append(entry)
        described["fields"] = fields
        return described

    # -------------------------------------------------------------- as a field of another record

    def type(self) -> str:
        return type(self).__name__

    def python_type(self):
        return type(self)

    def default(self):
        return self._default

    def required_default(self) -> bool:
        return self._required_default

    def validate_type(self, name, value):
        return self._validate_nested(name, value)

    # -------------------------------------------------------------- values

    def to_plain(self, value):
        """``value`` (a record of this class, this being its field's declaration) as a dict."""
        return None if value is None else value.as_dict()

    def as_dict(self) -> dict:
        """The record's values as plain values (nested records as dicts, enums as names)."""
        return {name: kind.to_plain(getattr(self, name)) for name, kind in self._fields.items()}

    def from_plain(self, value):
        return None if value is None else type(self).from_dict(value)

    @classmethod
    def from_dict(cls, values: dict) -> Record:
        """A record from decoded values (fields it does not declare are left out: a
        newer writer's additions)."""
        known = {name: cls._fields[name].from_plain(v) for name, v in values.items() if name in cls._fields}
        return cls(**known)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Record) or set(other._fields) != set(self._fields):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self._fields)

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        values = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({values})"
