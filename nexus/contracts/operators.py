"""Operator authorization: may the calling user operate an area of the platform?

Runtime decides (it owns users and permissions); a role with an admin surface (Integration's
`/admin/v1/integration/...`) exchanges the user's token for a delegation and asks
`POST /internal/v1/runtime/operators/check`: 200 = allowed, 403 = not allowed, 401 = the
delegation is not valid. Today operating any area needs a System Administrator.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict

OPERATOR_CHECK_PATH = "/internal/v1/runtime/operators/check"
OPERATOR_CHECK_CAPABILITY = "runtime.operators.check"

OperatorArea = Literal["integration", "catalog"]


class OperatorCheckRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    area: OperatorArea


class OperatorCheckResponse(BaseModel):
    area: OperatorArea
    org_id: str
    user_id: str
