"""ACLs kept as Kafka's StandardAuthorizer keeps them, and listed and deleted by its filter
rules (CreateAcls, DescribeAcls, DeleteAcls). A broker started with an authorizer enforces
them (_authorize.py); without one every client may do everything. Each handler takes (apis,
request, version, ctx) and returns a response object."""

from collections import namedtuple

from .. import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)
from ..error_codes import by_name

# Kafka's enums (ResourceType, PatternType, AclOperation, AclPermissionType): 0 UNKNOWN, 1 ANY.
UNKNOWN, ANY = 0, 1
MATCH, LITERAL, PREFIXED = 2, 3, 4
WILDCARD = "*"
NONE = 0
# The codes Kafka 4 knows: ResourceType (TOPIC .. USER), AclOperation (ALL ..
# TWO_PHASE_COMMIT), AclPermissionType (DENY, ALLOW).
RESOURCE_TYPES = range(2, 8)
OPERATIONS = range(2, 16)
PERMISSION_TYPES = (2, 3)
CLUSTER, CLUSTER_NAME = 4, "kafka-cluster"

Acl = namedtuple(
    "Acl", "resource_type resource_name pattern_type principal host operation permission_type"
)


class AclError(Exception):
    pass


class AclLimit(AclError):
    """The store holds its limit of ACLs."""


def check_new(acl):
    """AclError unless `acl` names one resource, pattern, operation and permission, as
    Kafka reads them (a code it does not know is UNKNOWN to it, and refused)."""
    if acl.resource_type not in RESOURCE_TYPES:
        raise AclError(f"resource type {acl.resource_type} is not one resource type")
    if acl.pattern_type not in (LITERAL, PREFIXED):
        raise AclError(f"pattern type {acl.pattern_type}: only LITERAL (3) or PREFIXED (4)")
    if acl.operation not in OPERATIONS or acl.permission_type not in PERMISSION_TYPES:
        raise AclError("an ACL names one operation and one permission type (not ANY)")
    if not acl.principal or ":" not in acl.principal or not acl.host:
        raise AclError("an ACL names a principal (Type:name, as User:alice) and a host")
    if not acl.resource_name:
        raise AclError("Invalid empty resource name")
    if acl.resource_type == CLUSTER and acl.resource_name != CLUSTER_NAME:
        raise AclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")


def matches(f, acl):
    """Kafka's AclBindingFilter.matches: None or ANY fields match everything."""
    if f.resource_type != ANY and f.resource_type != acl.resource_type:
        return False
    if f.pattern_type == MATCH:
        name = f.resource_name
        if name is not None and not (
            (acl.pattern_type == LITERAL and acl.resource_name in (name, WILDCARD))
            or (acl.pattern_type == PREFIXED and name.startswith(acl.resource_name))
        ):
            return False
    else:
        if f.pattern_type != ANY and f.pattern_type != acl.pattern_type:
            return False
        if f.resource_name is not None and f.resource_name != acl.resource_name:
            return False
    if f.principal is not None and f.principal != acl.principal:
        return False
    if f.host is not None and f.host != acl.host:
        return False
    if f.operation != ANY and f.operation != acl.operation:
        return False
    return f.permission_type == ANY or f.permission_type == acl.permission_type


class AclStore:
    """The ACLs in the order created, without duplicates, at most `limit` of them (a dict:
    adding and removing cost the same however many there are)."""

    def __init__(self, limit=None):
        self.limit = limit
        self._acls = {}  # Acl -> None, in the order created
        self.changes = 0  # counts additions and removals: the authorizer's index follows it

    @property
    def acls(self):
        return list(self._acls)

    def __len__(self):
        return len(self._acls)

    def add(self, acl):
        check_new(acl)
        if acl in self._acls:
            return
        if self.limit is not None and len(self._acls) >= self.limit:
            raise AclLimit(f"{self.limit} ACLs are kept already (max_acls)")
        self._acls[acl] = None
        self.changes += 1

    def find(self, f):
        return [a for a in self._acls if matches(f, a)]

    def remove(self, f):
        gone = self.find(f)
        for a in gone:
            del self._acls[a]
        self.changes += 1
        return gone


def _filter(r):
    return Acl(
        r.resource_type_filter,
        r.resource_name_filter,
        r.pattern_type_filter,
        r.principal_filter,
        r.host_filter,
        r.operation,
        r.permission_type,
    )


def create_acls(apis, request, version, ctx):
    R = CreateAclsResponse
    results = []
    for c in request.creations:
        acl = Acl(
            c.resource_type,
            c.resource_name,
            c.resource_pattern_type,
            c.principal,
            c.host,
            c.operation,
            c.permission_type,
        )
        try:
            apis.acls.add(acl)
        except AclError as e:
            error = "POLICY_VIOLATION" if isinstance(e, AclLimit) else "INVALID_REQUEST"
            results.append(
                R.AclCreationResult(error_code=by_name(error).code, error_message=str(e))
            )
        else:
            results.append(R.AclCreationResult(error_code=NONE, error_message=None))
    return R(results=results)


def describe_acls(apis, request, version, ctx):
    R = DescribeAclsResponse
    resources = {}
    for acl in apis.acls.find(_filter(request)):
        key = (acl.resource_type, acl.resource_name, acl.pattern_type)
        resources.setdefault(key, []).append(
            R.AclDescription(
                principal=acl.principal,
                host=acl.host,
                operation=acl.operation,
                permission_type=acl.permission_type,
            )
        )
    return R(
        error_code=NONE,
        error_message=None,
        resources=[
            R.DescribeAclsResource(resource_type=t, resource_name=n, pattern_type=p, acls=acls)
            for (t, n, p), acls in resources.items()
        ],
    )


def delete_acls(apis, request, version, ctx):
    R = DeleteAclsResponse
    results = []
    for f in request.filters:
        gone = apis.acls.remove(_filter(f))
        results.append(
            R.DeleteAclsFilterResult(
                error_code=NONE,
                error_message=None,
                matching_acls=[
                    R.DeleteAclsMatchingAcl(
                        error_code=NONE,
                        error_message=None,
                        resource_type=a.resource_type,
                        resource_name=a.resource_name,
                        pattern_type=a.pattern_type,
                        principal=a.principal,
                        host=a.host,
                        operation=a.operation,
                        permission_type=a.permission_type,
                    )
                    for a in gone
                ],
            )
        )
    return R(filter_results=results)


# (request class, Kafka 4.x's lowest version, highest, handler)
HANDLERS = (
    (CreateAclsRequest, 1, 3, create_acls),
    (DescribeAclsRequest, 1, 3, describe_acls),
    (DeleteAclsRequest, 1, 3, delete_acls),
)
