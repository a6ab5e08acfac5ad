from django.db import connection, transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_POST

from .models import Signup
from .tasks import send_welcome


@require_POST
def signup(request: HttpRequest) -> JsonResponse:
    """The signup and its welcome email's job commit together, on Django's own connection:
    if anything in the block fails, neither exists."""
    with transaction.atomic():
        created = Signup.objects.create(email=request.POST["email"])
        job_id = send_welcome.enqueue(signup_id=created.id, conn=connection)
    return JsonResponse({"signup": created.id, "job": job_id})
