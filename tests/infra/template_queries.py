"""Reading a synthesized template by what things are, never by their hashed logical IDs.

A resource is found by a property (a function's name, a table's name) or by
resolving a construct's own token through its stack (``stack.resolve(queue.queue_arn)``
gives exactly the intrinsic the template holds), so the tests survive renames of
construct IDs and never spell a hash.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from infra.config import Context, LambdaFunction
from infra.lambdas import HelperFunction

#: Stand-ins for deploy-time values, in the shapes the functions' settings check.
ACCOUNT = "123456789012"
REGION = "eu-west-1"


@dataclass(frozen=True)
class Synth:
    """One synthesized stack: the stack object (to resolve tokens), its config and its template JSON."""

    stack: Any
    config: Context
    template: Mapping[str, Any]

    @property
    def resources(self) -> Mapping[str, Mapping[str, Any]]:
        resources: Mapping[str, Mapping[str, Any]] = self.template["Resources"]
        return resources

    def of_type(self, resource_type: str) -> dict[str, Mapping[str, Any]]:
        return {k: v for k, v in self.resources.items() if v["Type"] == resource_type}

    def resolve(self, token: Any) -> Any:
        return self.stack.resolve(token)

    def logical_id(self, construct: Any) -> str:
        """The logical ID of a construct's CloudFormation resource (looked up, never spelt)."""
        return str(self.stack.get_logical_id(construct.node.default_child))

    # -- functions ---------------------------------------------------------------------

    def function(self, function: LambdaFunction | HelperFunction) -> tuple[str, Mapping[str, Any]]:
        name = f"{self.config.stack_name}-{function.value}"
        found = [(k, v) for k, v in self.of_type("AWS::Lambda::Function").items() if _name(v) == name]
        assert len(found) == 1, f"expected one function named {name}, found {len(found)}"
        return found[0]

    def environment(self, function: LambdaFunction) -> dict[str, Any]:
        variables: dict[str, Any] = self.function(function)[1]["Properties"]["Environment"]["Variables"]
        return variables

    def role_statements(self, function: LambdaFunction | HelperFunction) -> list[dict[str, Any]]:
        """Every statement of every inline policy attached to the function's role."""
        role_id = self.function(function)[1]["Properties"]["Role"]["Fn::GetAtt"][0]
        return self.statements_of_role(role_id)

    def statements_of_role(self, role_id: str) -> list[dict[str, Any]]:
        statements: list[dict[str, Any]] = []
        for policy in self.of_type("AWS::IAM::Policy").values():
            if {"Ref": role_id} in policy["Properties"]["Roles"]:
                statements.extend(policy["Properties"]["PolicyDocument"]["Statement"])
        return statements

    def mappings_of(self, function: LambdaFunction) -> list[Mapping[str, Any]]:
        function_id = self.function(function)[0]
        return [
            m["Properties"]
            for m in self.of_type("AWS::Lambda::EventSourceMapping").values()
            if m["Properties"]["FunctionName"] == {"Ref": function_id}
        ]

    # -- deploy-time values ----------------------------------------------------------------

    def concrete(self, value: Any) -> str:
        """A plausible deployed value for a template value (a literal, a Ref or a GetAtt Arn)."""
        if isinstance(value, str):
            return value
        if "Ref" in value:
            target = self.resources[value["Ref"]]["Type"]
            return {
                "AWS::SQS::Queue": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{value['Ref']}",
                "AWS::SecretsManager::Secret": f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:cursor-AbCdEf",
                "AWS::SNS::Topic": f"arn:aws:sns:{REGION}:{ACCOUNT}:alerts",
            }[target]
        logical_id, attribute = value["Fn::GetAtt"]
        assert attribute == "Arn", value
        target = self.resources[logical_id]["Type"]
        return {
            "AWS::Lambda::Function": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{logical_id}",
            "AWS::SQS::Queue": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{logical_id}",
        }[target]

    def concrete_environment(self, function: LambdaFunction) -> dict[str, str]:
        return {name: self.concrete(value) for name, value in self.environment(function).items()}


def actions(statement: Mapping[str, Any]) -> frozenset[str]:
    action = statement["Action"]
    return frozenset([action] if isinstance(action, str) else action)


def resources(statement: Mapping[str, Any]) -> list[Any]:
    resource = statement["Resource"]
    return resource if isinstance(resource, list) else [resource]


def render(value: Any) -> str:
    """An intrinsic as text: Fn::Join flattened, Ref as ${Name}, GetAtt as ${Name.Attr}."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(render(v) for v in value)
    if "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return str(separator).join(render(p) for p in parts)
    if "Ref" in value:
        return "${" + str(value["Ref"]) + "}"
    if "Fn::GetAtt" in value:
        return "${" + ".".join(value["Fn::GetAtt"]) + "}"
    return json.dumps(value, sort_keys=True)


def grants(statements: list[dict[str, Any]], effect: str = "Allow") -> set[tuple[str, str, str]]:
    """Every (action, resource, condition) an identity policy allows (or denies), one triple per action and resource."""
    found: set[tuple[str, str, str]] = set()
    for statement in statements:
        assert statement["Effect"] in ("Allow", "Deny"), statement
        if statement["Effect"] != effect:
            continue
        condition = json.dumps(statement.get("Condition", {}), sort_keys=True)
        for action in actions(statement):
            for resource in resources(statement):
                found.add((action, render(resource), condition))
    return found


def walk(value: Any) -> Iterator[Any]:
    yield value
    if isinstance(value, Mapping):
        for item in value.values():
            yield from walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from walk(item)


def _name(function: Mapping[str, Any]) -> str:
    return str(function["Properties"].get("FunctionName", ""))
