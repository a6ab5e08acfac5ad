from typing import Any

from django.db import transaction
from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.http import require_GET, require_POST

from pgq_core import JobNotFound, Queue
from pgq_core.contrib.django import conf

from .models import Signup
from .tasks import send_welcome


@require_POST
def signup(request: HttpRequest) -> JsonResponse:
    """The signup and its welcome email's job commit together, on Django's own connection:
    if anything in the block fails, neither exists."""
    with transaction.atomic():
        created = Signup.objects.create(email=request.POST["email"])
        job_id = send_welcome.enqueue(signup_id=created.id, conn=conf.queue())
    return JsonResponse({"signup": created.id, "job": job_id})


@require_GET
def job_status(request: HttpRequest, job_id: int) -> JsonResponse:
    """How the job is doing, read on a connection of pgq's own (Django's loads JSON as text)."""
    with Queue.connect(conf.dsn(), conf.schema()) as queue:
        try:
            job = queue.job(job_id)
        except JobNotFound:
            raise Http404(f"no job {job_id}") from None
    answer: dict[str, Any] = {
        "id": job.id, "status": job.status, "result": job.result, "error": job.last_error
    }
    return JsonResponse(answer)
