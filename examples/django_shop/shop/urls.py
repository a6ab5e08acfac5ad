from django.urls import path
from signups import views

urlpatterns = [
    path("signup/", views.signup),
    path("jobs/<int:job_id>/", views.job_status),
]
