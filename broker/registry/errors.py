"""The registry's errors as Confluent's REST API answers them: an HTTP status and a body
{"error_code": N, "message": "..."} with Confluent's codes and messages
(io.confluent.kafka.schemaregistry.rest.exceptions.Errors)."""

from __future__ import annotations


class RestError(Exception):
    def __init__(self, status: int, code: int, message: str):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def subject_not_found(subject: str) -> RestError:
    return RestError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(version: int | str) -> RestError:
    return RestError(404, 40402, f"Version {version} not found.")


def schema_not_found(schema_id: int | None = None) -> RestError:
    return RestError(404, 40403, "Schema not found" if schema_id is None else f"Schema {schema_id} not found")


def subject_soft_deleted(subject: str) -> RestError:
    return RestError(404, 40404, f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently")


def subject_not_soft_deleted(subject: str) -> RestError:
    return RestError(404, 40405, f"Subject '{subject}' was not deleted first before being permanently deleted")


def version_soft_deleted(subject: str, version: int) -> RestError:
    return RestError(
        404, 40406, f"Subject '{subject}' Version {version} was soft deleted.Set permanent=true to delete permanently"
    )


def version_not_soft_deleted(subject: str, version: int) -> RestError:
    return RestError(
        404, 40407, f"Subject '{subject}' Version {version} was not deleted first before being permanently deleted"
    )


def no_subject_compatibility(subject: str) -> RestError:
    return RestError(404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured")


def no_subject_mode(subject: str) -> RestError:
    return RestError(404, 40409, f"Subject '{subject}' does not have subject-level mode configured")


def incompatible(message: str) -> RestError:
    return RestError(409, 409, message)


def invalid_schema(message: str) -> RestError:
    return RestError(422, 42201, message)


def invalid_version(version: str) -> RestError:
    return RestError(
        422,
        42202,
        f"The specified version '{version}' is not a valid version id. Allowed values are "
        'between [1, 2^31-1] and the string "latest"',
    )


def invalid_compatibility(level: object) -> RestError:
    return RestError(
        422,
        42203,
        "Invalid compatibility level. Valid values are none, backward, forward, full, "
        "backward_transitive, forward_transitive, and full_transitive",
    )


def invalid_mode(mode: object) -> RestError:
    return RestError(
        422, 42204, "Invalid mode. Valid values are READWRITE, READONLY, READONLY_OVERRIDE, IMPORT and FORWARD."
    )


def not_permitted(message: str) -> RestError:
    return RestError(422, 42205, message)


def reference_exists(subject: str, version: int) -> RestError:
    return RestError(
        422,
        42206,
        f"One or more references exist to the schema {{magic=1,keytype=SCHEMA,subject={subject},version={version}}}.",
    )


def id_does_not_match(message: str) -> RestError:
    return RestError(422, 42207, message)


def invalid_subject(subject: str) -> RestError:
    return RestError(422, 42208, f"The specified subject '{subject}' is not a valid.")


def schema_too_large(message: str) -> RestError:
    return RestError(422, 42209, message)


def store_error(message: str) -> RestError:
    return RestError(500, 50001, message)


def timeout(message: str) -> RestError:
    return RestError(500, 50002, message)


def forwarding_failed(message: str) -> RestError:
    return RestError(500, 50003, message)


def unknown_leader(message: str = "Leader not known.") -> RestError:
    return RestError(500, 50004, message)


# the HTTP layer's own (Jersey's and Jetty's in Confluent's registry)
def http(status: int, reason: str) -> RestError:
    return RestError(status, status, f"HTTP {status} {reason}")
